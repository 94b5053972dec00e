"""The built-in job: the Criteo DLRM of `xdl-ec train` without --script, written against the public job API."""
