"""The pipeline every planned API goes through (pipeline.py, read top to bottom) and its
steps: who is calling (auth), the body and its limits, the model, the quota, the plan,
the upstream call, the answer; the exchange that becomes the usage row. An API is a
dialect of it (dialect.py says what one must tell it); nothing here knows any API."""
