//! Datastream: bootstrap log records as NDJSON files under the state dir.
