"""A Pub/Sub emulator speaking the real google.pubsub.v1 gRPC API.

The official emulator needs Java and gcloud, which these machines lack; this one
is pure Python on grpcio and the proto-plus types google-cloud-pubsub ships, so
the official clients reach it through PUBSUB_EMULATOR_HOST unchanged.
See README.md beside this file for what it supports and how it differs.
"""
