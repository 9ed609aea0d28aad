"""One contract suite for the EventStore/LeaseStore ports, run against every adapter."""
