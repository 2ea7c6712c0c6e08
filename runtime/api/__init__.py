"""The DataStream API: what a job definition uses; nothing here knows where it runs."""
