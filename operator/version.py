"""Version of the StreamJob API the operator serves (the operator arrives in a later issue)."""

API_GROUP = "streamjob.io"
API_VERSION = "v1alpha1"
