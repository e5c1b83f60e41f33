//! The daemon: holds a logind delay inhibitor, drains on shutdown, restores on the next boot.
