//! exitlab's VMM core.
