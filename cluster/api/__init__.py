"""The HTTP API: FastAPI routers per resource, problem+json errors, schemas."""
