"""The HTTP edge every function shares: settings once, errors as refusals (edge), the
lifecycle routes, waiting reads, pages, a batch's progress and who is asking."""
