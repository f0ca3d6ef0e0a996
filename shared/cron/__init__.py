"""The cron machinery: declared schedules, the ticks that submit their runs, and the
view of both that the API and CLI show."""
