//! exitlab's exit lab: benchmark catalogue, runner, statistics, results and reports.
