"""Tests of tensorpress.integrations against the framework stand-ins."""
