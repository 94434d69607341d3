//! `MODULE.PARAM` knobs and their values: parsing, and comparing a value asked with the
//! one the kernel shows back (booleans are taken as 1/0/y/n/on/off and shown as Y/N,
//! integers in any base the kernel reads).

use std::fmt;

use crate::param_error::KnobError;

/// The longest value accepted (sysfs takes a page; no parameter needs more than this).
const VALUE_MAX: usize = 1024;

/// A KVM module parameter named as `MODULE.PARAM`.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ParamSpec {
    /// The module, as sysfs names it (`-` given is taken as `_`, as modprobe does).
    pub module: String,
    /// The parameter.
    pub param: String,
}

impl ParamSpec {
    /// Parses `MODULE.PARAM`: split at the first dot; module names may hold `_`, and a
    /// `-` in one is taken as `_` (as modprobe does).
    pub fn parse(spec: &str) -> Result<ParamSpec, KnobError> {
        let bad = |why: &str| KnobError::BadSpec {
            spec: spec.to_string(),
            why: why.to_string(),
        };
        let (module, param) = spec
            .split_once('.')
            .ok_or_else(|| bad("there is no dot between the module and the parameter"))?;
        if module.is_empty() {
            return Err(bad("the module name is empty"));
        }
        if param.is_empty() {
            return Err(bad("the parameter name is empty"));
        }
        if !module
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
        {
            return Err(bad("a module name holds only letters, digits, _ and -"));
        }
        if !param.chars().all(|c| c.is_ascii_alphanumeric() || c == '_') {
            return Err(bad("a parameter name holds only letters, digits and _"));
        }
        Ok(ParamSpec {
            module: module.replace('-', "_"),
            param: param.to_string(),
        })
    }

    /// Checks that `value` can be written to sysfs and passed to modprobe as it is; the
    /// module itself decides later whether it takes it.
    pub fn check_value(&self, value: &str) -> Result<(), KnobError> {
        let bad = |why: &str| KnobError::BadValue {
            knob: self.to_string(),
            value: value.to_string(),
            why: why.to_string(),
        };
        match unpassable(value) {
            Some(why) => Err(bad(why)),
            None => Ok(()),
        }
    }
}

impl fmt::Display for ParamSpec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}.{}", self.module, self.param)
    }
}

/// Why `value` cannot be written to sysfs or passed to modprobe as it is (it would be
/// split, quoted or cut); `None` when it can.
pub fn unpassable(value: &str) -> Option<&'static str> {
    if value.is_empty() {
        Some("it is empty")
    } else if value.len() > VALUE_MAX {
        Some("it is longer than 1024 bytes")
    } else if value == "(null)" {
        Some("it is how the kernel shows an unset string")
    } else if value
        .chars()
        .any(|c| c.is_whitespace() || c.is_control() || c == '"' || c == '\'')
    {
        Some("it holds a space, a quote or a control character")
    } else {
        None
    }
}

/// The boolean a value stands for, as the kernel reads a `bool` parameter: 1/0, y/n,
/// Y/N, on/off, true/false (letters in any case); `None` for anything else.
pub fn parse_bool(value: &str) -> Option<bool> {
    match value.to_ascii_lowercase().as_str() {
        "1" | "y" | "on" | "true" => Some(true),
        "0" | "n" | "off" | "false" => Some(false),
        _ => None,
    }
}

/// The integer a value stands for as the kernel reads one (`kstrtoll` base 0): decimal,
/// `0x` hex or leading-`0` octal, with an optional sign.
pub fn parse_int(value: &str) -> Option<i128> {
    let (negative, digits) = match value.as_bytes().first()? {
        b'-' => (true, &value[1..]),
        b'+' => (false, &value[1..]),
        _ => (false, value),
    };
    let (radix, digits) = if let Some(hex) = digits
        .strip_prefix("0x")
        .or_else(|| digits.strip_prefix("0X"))
    {
        (16, hex)
    } else if digits.len() > 1 && digits.starts_with('0') {
        (8, &digits[1..])
    } else {
        (10, digits)
    };
    // from_str_radix takes a sign of its own: the kernel does not, after the prefix.
    if digits.is_empty() || !digits.chars().all(|c| c.is_digit(radix)) {
        return None;
    }
    let magnitude = i128::from_str_radix(digits, radix).ok()?;
    Some(if negative { -magnitude } else { magnitude })
}

/// Whether the value `shown` by sysfs is the value `asked`: the same text, the same
/// boolean when the kernel shows `Y`/`N`, or the same integer.
pub fn same_value(asked: &str, shown: &str) -> bool {
    if asked == shown {
        return true;
    }
    if shown == "Y" || shown == "N" {
        return parse_bool(asked) == Some(shown == "Y");
    }
    match (parse_int(asked), parse_int(shown)) {
        (Some(a), Some(b)) => a == b,
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn good_specs() {
        let s = ParamSpec::parse("kvm.halt_poll_ns").unwrap();
        assert_eq!(
            (s.module.as_str(), s.param.as_str()),
            ("kvm", "halt_poll_ns")
        );
        let s = ParamSpec::parse("kvm_amd.npt").unwrap();
        assert_eq!((s.module.as_str(), s.param.as_str()), ("kvm_amd", "npt"));
        let s = ParamSpec::parse("kvm-intel.enable_ipiv").unwrap();
        assert_eq!(s.module, "kvm_intel", "- in a module name is _");
        assert_eq!(s.to_string(), "kvm_intel.enable_ipiv");
    }

    #[test]
    fn bad_specs_say_why() {
        for (spec, why) in [
            (
                "kvm",
                "there is no dot between the module and the parameter",
            ),
            ("", "there is no dot between the module and the parameter"),
            (".npt", "the module name is empty"),
            ("kvm_amd.", "the parameter name is empty"),
            (
                "kvm amd.npt",
                "a module name holds only letters, digits, _ and -",
            ),
            (
                "kvm/../x.npt",
                "a module name holds only letters, digits, _ and -",
            ),
            (
                "kvm.halt.poll",
                "a parameter name holds only letters, digits and _",
            ),
            (
                "kvm.halt_poll_ns=0",
                "a parameter name holds only letters, digits and _",
            ),
        ] {
            let e = ParamSpec::parse(spec).unwrap_err();
            assert!(matches!(e, KnobError::BadSpec { .. }), "{spec}: {e:?}");
            assert_eq!(
                e.to_string(),
                format!(
                    "cannot read `{spec}` as MODULE.PARAM: {why}; write it as e.g. \
                     kvm.halt_poll_ns or kvm_amd.npt"
                ),
                "{spec}"
            );
        }
    }

    #[test]
    fn values_are_checked_for_what_sysfs_and_modprobe_take() {
        let s = ParamSpec::parse("kvm.halt_poll_ns").unwrap();
        for v in ["0", "200000", "Y", "off", "-1", "0x10", "a,b"] {
            s.check_value(v).unwrap();
        }
        for (v, why) in [
            ("", "it is empty"),
            ("1 2", "it holds a space, a quote or a control character"),
            ("1\n", "it holds a space, a quote or a control character"),
            ("\"1\"", "it holds a space, a quote or a control character"),
        ] {
            let e = s.check_value(v).unwrap_err();
            assert!(matches!(e, KnobError::BadValue { .. }));
            assert!(e.to_string().contains(why), "{e}");
            assert!(
                e.to_string()
                    .starts_with("kvm.halt_poll_ns: cannot use the value"),
                "{e}"
            );
        }
        assert!(s.check_value(&"1".repeat(1025)).is_err());
    }

    #[test]
    fn booleans_are_normalised_as_the_kernel_shows_them() {
        for yes in ["1", "y", "Y", "on", "ON", "true"] {
            assert!(same_value(yes, "Y"), "{yes}");
            assert!(!same_value(yes, "N"), "{yes}");
        }
        for no in ["0", "n", "N", "off", "Off", "false"] {
            assert!(same_value(no, "N"), "{no}");
            assert!(!same_value(no, "Y"), "{no}");
        }
        // Not a boolean: never the same as Y or N.
        assert!(!same_value("2", "Y") && !same_value("2", "N"));
        assert!(!same_value("yes", "Y"));
        // An int parameter shows what it holds: 1 is 1, not Y.
        assert!(same_value("1", "1"));
        assert!(!same_value("Y", "1"));
    }

    #[test]
    fn integers_compare_by_value() {
        assert!(same_value("200000", "200000"));
        assert!(same_value("0x10", "16"));
        assert!(same_value("010", "8"));
        assert!(same_value("+5", "5"));
        assert!(same_value("-1", "-1"));
        assert!(!same_value("200000", "0"));
        assert!(!same_value("--1", "1"));
        assert_eq!(parse_int("0"), Some(0));
        assert_eq!(parse_int("-0x1f"), Some(-31));
        assert_eq!(parse_int("09"), None);
        assert_eq!(parse_int(""), None);
        assert_eq!(parse_int("-"), None);
        assert_eq!(parse_int("0x-1"), None);
        assert_eq!(parse_int("0x"), None);
        // Text values compare as text.
        assert!(same_value("auto", "auto"));
        assert!(!same_value("auto", "never"));
    }
}
