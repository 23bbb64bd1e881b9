"""The server's ground floor: settings, the services one process shares, request ids,
the heavy-plan slot, booking finished exchanges, and building HTTP answers. Imports
nothing else of the server."""
