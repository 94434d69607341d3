//! `exitlab report` and `exitlab compare`: read results files and print them.

use std::path::Path;

use exitlab_lab::{compare, report, results};

use crate::exit::usage_error;

/// `exitlab compare BEFORE AFTER`.
pub fn compare_cmd(before: &Path, after: &Path) -> i32 {
    let b = match results::read(before) {
        Ok(r) => r,
        Err(e) => return usage_error(e),
    };
    let a = match results::read(after) {
        Ok(r) => r,
        Err(e) => return usage_error(e),
    };
    print!("{}", compare::render_comparison(&compare::compare(&b, &a)));
    0
}

/// `exitlab report FILE`.
pub fn report_cmd(file: &Path, markdown: bool) -> i32 {
    match results::read(file) {
        Ok(r) => {
            if markdown {
                print!("{}", report::render_markdown(&r));
            } else {
                print!("{}", report::render_table(&r));
            }
            0
        }
        Err(e) => usage_error(e),
    }
}
