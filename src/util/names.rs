//! Typed names: every closed set of names (presets, tasks, objectives, routing modes, event
//! kinds) is an enum with one spelling, shared by the command line (clap's `ValueEnum`), the
//! spec files and `config.json` (serde, through [`named_enum!`]), and the frames. Unknown
//! names are errors that list the allowed ones and suggest the closest.

/// A closed set of names as an enum with one spelling per variant: `ALL`, `NAMES`, `name()`,
/// `parse()` (errors list the allowed names and suggest the closest), `Display`, `FromStr`,
/// serde as a plain string, and clap's `ValueEnum`.
#[macro_export]
macro_rules! named_enum {
    (
        $(#[$m:meta])*
        pub enum $T:ident ($what:literal) {
            $( $(#[$vm:meta])* $V:ident = $n:literal ),+ $(,)?
        }
    ) => {
        $(#[$m])*
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
        pub enum $T { $( $(#[$vm])* $V ),+ }

        impl $T {
            pub const ALL: &'static [$T] = &[$($T::$V),+];
            pub const NAMES: &'static [&'static str] = &[$($n),+];

            pub fn name(self) -> &'static str {
                match self { $($T::$V => $n),+ }
            }

            pub fn parse(s: &str) -> anyhow::Result<Self> {
                match s {
                    $($n => Ok($T::$V),)+
                    _ => Err(anyhow::anyhow!($crate::util::names::unknown($what, s, Self::NAMES))),
                }
            }
        }

        impl std::fmt::Display for $T {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str(self.name())
            }
        }

        impl std::str::FromStr for $T {
            type Err = anyhow::Error;
            fn from_str(s: &str) -> anyhow::Result<Self> {
                Self::parse(s)
            }
        }

        impl serde::Serialize for $T {
            fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
                s.serialize_str(self.name())
            }
        }

        impl<'de> serde::Deserialize<'de> for $T {
            fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
                let s = <String as serde::Deserialize>::deserialize(d)?;
                Self::parse(&s).map_err(|e| <D::Error as serde::de::Error>::custom(e))
            }
        }

        impl clap::ValueEnum for $T {
            fn value_variants<'a>() -> &'a [Self] {
                Self::ALL
            }
            fn to_possible_value(&self) -> Option<clap::builder::PossibleValue> {
                Some(clap::builder::PossibleValue::new(self.name()))
            }
        }
    };
}

/// ", did you mean 'x'?" for the closest allowed name, or "" when nothing is close.
pub fn suggest(given: &str, allowed: &[&str]) -> String {
    let best = allowed
        .iter()
        .map(|a| (levenshtein(given, a), *a))
        .min_by_key(|(d, _)| *d);
    match best {
        Some((d, a)) if d <= (given.len().max(2) / 2).max(2) => format!("; did you mean '{a}'?"),
        _ => String::new(),
    }
}

fn levenshtein(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut prev: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut cur = vec![i + 1; b.len() + 1];
        for (j, cb) in b.iter().enumerate() {
            let sub = prev[j] + usize::from(ca != *cb);
            cur[j + 1] = sub.min(prev[j + 1] + 1).min(cur[j] + 1);
        }
        prev = cur;
    }
    prev[b.len()]
}

/// "unknown {what} '{given}'; allowed: a, b, c; did you mean 'b'?"
pub fn unknown(what: &str, given: &str, allowed: &[&str]) -> String {
    format!(
        "unknown {what} '{given}'; allowed: {}{}",
        allowed.join(", "),
        suggest(given, allowed)
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    #[test]
    fn suggests_close_names_only() {
        assert_eq!(suggest("tyo", &["tiny", "toy"]), "; did you mean 'toy'?");
        assert_eq!(suggest("zzzzzzzz", &["tiny", "toy"]), "");
    }
}

#[cfg(test)]
mod enum_tests {
    crate::named_enum! {
        /// A test set.
        pub enum Colour("colour") {
            Red = "red",
            DarkBlue = "dark_blue",
        }
    }

    #[test]
    fn one_spelling_for_parse_serde_and_clap() {
        assert_eq!(Colour::parse("dark_blue").unwrap(), Colour::DarkBlue);
        let e = Colour::parse("dark_blu").unwrap_err().to_string();
        assert!(
            e.contains(
                "unknown colour 'dark_blu'; allowed: red, dark_blue; did you mean 'dark_blue'?"
            ),
            "{e}"
        );
        assert_eq!(serde_json::to_string(&Colour::Red).unwrap(), "\"red\"");
        let back: Colour = serde_json::from_str("\"dark_blue\"").unwrap();
        assert_eq!(back, Colour::DarkBlue);
        let v = <Colour as clap::ValueEnum>::from_str("red", false).unwrap();
        assert_eq!(v, Colour::Red);
    }
}

/// The distinct values of `v` in order of first appearance.
pub fn distinct(v: impl IntoIterator<Item = String>) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    for x in v {
        if !out.contains(&x) {
            out.push(x);
        }
    }
    out
}
