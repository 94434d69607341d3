//! Guest image loaders, memory maps, ACPI tables and initial register state for exitlab.
