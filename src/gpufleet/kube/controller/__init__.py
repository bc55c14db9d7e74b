"""The controller: its loop, informers, binder, events, statuses, leader election, conversion, metrics."""
