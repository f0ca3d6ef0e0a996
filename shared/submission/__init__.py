"""Jobs coming in: the pure parsing of a request, the write order that creates each job,
and the jobs an upload starts (its routes, pure, and the upload jobs)."""
