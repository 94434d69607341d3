//! What the benchmarks share: the median and spread of repeated measurements, one line
//! per figure, and the verdict against a goal.

/// Median, 10th and 90th percentile, min and max of `v` (nearest rank).
pub fn spread(mut v: Vec<f64>) -> Option<[f64; 5]> {
    if v.is_empty() {
        return None;
    }
    v.sort_by(f64::total_cmp);
    let at = |q: f64| v[((q * (v.len() - 1) as f64).round() as usize).min(v.len() - 1)];
    Some([at(0.5), at(0.1), at(0.9), v[0], v[v.len() - 1]])
}

/// Prints one figure of `v` (its median, p10-p90 and min-max over `what`); returns the
/// median.
pub fn line(label: &str, unit: &str, what: &str, v: Vec<f64>) -> Option<f64> {
    let n = v.len();
    let [med, p10, p90, min, max] = spread(v)?;
    println!(
        "  {label:<34} median {med:7.2} {unit:<3}  p10-p90 {p10:.2}-{p90:.2}  min-max {min:.2}-{max:.2}  ({n} {what})"
    );
    Some(med)
}

/// Prints whether `median` meets `goal` (at most).
pub fn verdict(what: &str, median: Option<f64>, goal: f64, unit: &str) {
    match median {
        Some(m) if m <= goal => println!("goal {what} <= {goal} {unit}: met (median {m:.2})"),
        Some(m) => println!("goal {what} <= {goal} {unit}: NOT met (median {m:.2})"),
        None => println!("goal {what} <= {goal} {unit}: not measured"),
    }
}
