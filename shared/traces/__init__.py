"""A job's trace in Cloud Trace: the spans built from its record (spans.py, pure), a
stage's own spans (stage.py, ctx.span) and the one OTLP export call in the request that
ends an attempt (export.py); the W3C context itself is shared.tracing (docs/seeing.md)."""
