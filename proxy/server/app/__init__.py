"""The application: routes (each spelling of a route folded to one), the server's
connection limits, logging."""
