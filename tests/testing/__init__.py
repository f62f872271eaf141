"""Tests of the testing kit (`majordomus.testing`): its environment, time skipping, plugin."""
