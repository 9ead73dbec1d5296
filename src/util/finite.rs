//! The first non-finite float anywhere in a serialisable value, with its key path: one check
//! that covers every float setting of a spec (a TOML document, a resolved cell), whatever its
//! type, so a new key needs no new line here.
//!
//! TOML accepts `nan` and `inf`; JSON has no spelling for them (serde_json writes `null`, and
//! reading a `nan` into a `serde_json::Value` override table gives `null` too), so a setting
//! that reached a run's `config.json` as NaN would leave a folder that never parses again.
//! Settings are walked with a [`serde::Serializer`] that records the path to each float it is
//! handed, the same walk for every type that derives `Serialize`.

use serde::Serialize;
use serde::ser;
use std::fmt;

/// A float that is NaN or infinite, and where it sits (`rl.optimizer.lr`, `arms[1].rl.aux_coef`).
#[derive(Clone, Debug, PartialEq)]
pub struct NonFinite {
    /// Field and key names joined by `.`, sequence positions as `[i]`.
    pub path: String,
    pub value: f64,
}

impl fmt::Display for NonFinite {
    /// `key 'rl.kl_beta' = inf: must be a finite number`, the value spelled as in TOML.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let v = if self.value.is_nan() {
            "nan"
        } else if self.value > 0.0 {
            "inf"
        } else {
            "-inf"
        };
        write!(f, "key '{}' = {v}: must be a finite number", self.path)
    }
}

/// The first NaN or infinite float in `value` in serialisation order, with its path below
/// `prefix` (empty: from the top), or `None` when every float is finite.
pub fn first_non_finite<T: Serialize + ?Sized>(value: &T, prefix: &str) -> Option<NonFinite> {
    let mut walk = Walk {
        path: if prefix.is_empty() {
            Vec::new()
        } else {
            vec![prefix.to_string()]
        },
    };
    match value.serialize(&mut walk) {
        Err(Stop::Found(x)) => Some(x),
        // A value that refuses to serialise is not this check's concern (serialising it for
        // real reports that).
        Ok(()) | Err(Stop::Other(_)) => None,
    }
}

/// `Err` naming the key path and the value of the first non-finite float in `value` (see
/// [`first_non_finite`]).
pub fn ensure_finite<T: Serialize + ?Sized>(value: &T, prefix: &str) -> anyhow::Result<()> {
    match first_non_finite(value, prefix) {
        Some(x) => Err(anyhow::anyhow!("{x}")),
        None => Ok(()),
    }
}

/// Why the walk ended early: the finding, or a value's own serialisation error.
#[derive(Debug)]
enum Stop {
    Found(NonFinite),
    Other(String),
}

impl fmt::Display for Stop {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Stop::Found(x) => x.fmt(f),
            Stop::Other(e) => f.write_str(e),
        }
    }
}

impl std::error::Error for Stop {}

impl ser::Error for Stop {
    fn custom<M: fmt::Display>(msg: M) -> Self {
        Stop::Other(msg.to_string())
    }
}

/// The serializer: the path of the value being handed to it, one segment per field or key.
struct Walk {
    path: Vec<String>,
}

impl Walk {
    /// `Err` with the finding when `v` at the current path is NaN or infinite.
    fn float(&self, v: f64) -> Result<(), Stop> {
        if v.is_finite() {
            return Ok(());
        }
        Err(Stop::Found(NonFinite {
            path: self.path.join("."),
            value: v,
        }))
    }

    /// `value` walked with `segment` as the last path segment.
    fn under<T: Serialize + ?Sized>(&mut self, segment: String, value: &T) -> Result<(), Stop> {
        self.path.push(segment);
        let r = value.serialize(&mut *self);
        self.path.pop();
        r
    }

    /// `value` walked as element `i` of the sequence at the current path (`seeds[1]`).
    fn element<T: Serialize + ?Sized>(&mut self, i: usize, value: &T) -> Result<(), Stop> {
        let last = self.path.pop();
        let seg = format!("{}[{i}]", last.as_deref().unwrap_or(""));
        let r = self.under(seg, value);
        if let Some(l) = last {
            self.path.push(l);
        }
        r
    }
}

/// A sequence or map being walked: the walker and the next element's position or key.
struct Compound<'a> {
    walk: &'a mut Walk,
    next: usize,
    key: String,
}

/// Serializer methods for values that hold no float: nothing to walk.
macro_rules! skip_values {
    ($($method:ident: $t:ty),*) => {$(
        fn $method(self, _: $t) -> Result<(), Stop> {
            Ok(())
        }
    )*};
}

/// Compound traits whose elements are walked by position (`seeds[1]`).
macro_rules! walk_elements {
    ($($tr:ident::$method:ident => $end:ident),*) => {$(
        impl ser::$tr for Compound<'_> {
            type Ok = ();
            type Error = Stop;
            fn $method<T: Serialize + ?Sized>(&mut self, value: &T) -> Result<(), Stop> {
                self.element(value)
            }
            fn end(self) -> Result<(), Stop> {
                self.$end()
            }
        }
    )*};
}

/// Compound traits whose fields are walked by name (`rl.optimizer.lr`).
macro_rules! walk_fields {
    ($($tr:ident => $end:ident),*) => {$(
        impl ser::$tr for Compound<'_> {
            type Ok = ();
            type Error = Stop;
            fn serialize_field<T: Serialize + ?Sized>(
                &mut self,
                key: &'static str,
                value: &T,
            ) -> Result<(), Stop> {
                self.walk.under(key.to_string(), value)
            }
            fn end(self) -> Result<(), Stop> {
                self.$end()
            }
        }
    )*};
}

/// Floats are checked; sequences, maps, structs and variants are walked with their path;
/// every other value is skipped.
impl<'a> ser::Serializer for &'a mut Walk {
    type Ok = ();
    type Error = Stop;
    type SerializeSeq = Compound<'a>;
    type SerializeTuple = Compound<'a>;
    type SerializeTupleStruct = Compound<'a>;
    type SerializeTupleVariant = Compound<'a>;
    type SerializeMap = Compound<'a>;
    type SerializeStruct = Compound<'a>;
    type SerializeStructVariant = Compound<'a>;

    fn serialize_f32(self, v: f32) -> Result<(), Stop> {
        self.float(f64::from(v))
    }
    fn serialize_f64(self, v: f64) -> Result<(), Stop> {
        self.float(v)
    }
    skip_values! {
        serialize_bool: bool, serialize_i8: i8, serialize_i16: i16, serialize_i32: i32,
        serialize_i64: i64, serialize_u8: u8, serialize_u16: u16, serialize_u32: u32,
        serialize_u64: u64, serialize_char: char, serialize_str: &str, serialize_bytes: &[u8]
    }
    fn serialize_none(self) -> Result<(), Stop> {
        Ok(())
    }
    fn serialize_some<T: Serialize + ?Sized>(self, value: &T) -> Result<(), Stop> {
        value.serialize(self)
    }
    fn serialize_unit(self) -> Result<(), Stop> {
        Ok(())
    }
    fn serialize_unit_struct(self, _: &'static str) -> Result<(), Stop> {
        Ok(())
    }
    fn serialize_unit_variant(self, _: &'static str, _: u32, _: &'static str) -> Result<(), Stop> {
        Ok(())
    }
    fn serialize_newtype_struct<T: Serialize + ?Sized>(
        self,
        _: &'static str,
        value: &T,
    ) -> Result<(), Stop> {
        value.serialize(self)
    }
    fn serialize_newtype_variant<T: Serialize + ?Sized>(
        self,
        _: &'static str,
        _: u32,
        variant: &'static str,
        value: &T,
    ) -> Result<(), Stop> {
        self.under(variant.to_string(), value)
    }
    fn serialize_seq(self, _: Option<usize>) -> Result<Compound<'a>, Stop> {
        Ok(Compound::new(self))
    }
    fn serialize_tuple(self, _: usize) -> Result<Compound<'a>, Stop> {
        Ok(Compound::new(self))
    }
    fn serialize_tuple_struct(self, _: &'static str, _: usize) -> Result<Compound<'a>, Stop> {
        Ok(Compound::new(self))
    }
    fn serialize_tuple_variant(
        self,
        _: &'static str,
        _: u32,
        variant: &'static str,
        _: usize,
    ) -> Result<Compound<'a>, Stop> {
        Ok(Compound::variant(self, variant))
    }
    fn serialize_map(self, _: Option<usize>) -> Result<Compound<'a>, Stop> {
        Ok(Compound::new(self))
    }
    fn serialize_struct(self, _: &'static str, _: usize) -> Result<Compound<'a>, Stop> {
        Ok(Compound::new(self))
    }
    fn serialize_struct_variant(
        self,
        _: &'static str,
        _: u32,
        variant: &'static str,
        _: usize,
    ) -> Result<Compound<'a>, Stop> {
        Ok(Compound::variant(self, variant))
    }
}

impl<'a> Compound<'a> {
    /// A compound at the walker's current path.
    fn new(walk: &'a mut Walk) -> Self {
        Compound {
            walk,
            next: 0,
            key: String::new(),
        }
    }

    /// The fields of the enum variant `name`, walked under its name.
    fn variant(walk: &'a mut Walk, name: &str) -> Self {
        walk.path.push(name.to_string());
        Compound::new(walk)
    }

    /// The next element, walked at its position.
    fn element<T: Serialize + ?Sized>(&mut self, value: &T) -> Result<(), Stop> {
        self.next += 1;
        self.walk.element(self.next - 1, value)
    }

    /// The end of a sequence, map or struct.
    fn end_plain(self) -> Result<(), Stop> {
        Ok(())
    }

    /// The end of a variant's fields: its name leaves the path.
    fn end_variant(self) -> Result<(), Stop> {
        self.walk.path.pop();
        Ok(())
    }
}

// The compound traits share two bodies: an element walked at its position, a field walked
// under its name; a variant's name leaves the path at its end.
walk_elements! {
    SerializeSeq::serialize_element => end_plain,
    SerializeTuple::serialize_element => end_plain,
    SerializeTupleStruct::serialize_field => end_plain,
    SerializeTupleVariant::serialize_field => end_variant
}
walk_fields! {
    SerializeStruct => end_plain,
    SerializeStructVariant => end_variant
}

impl ser::SerializeMap for Compound<'_> {
    type Ok = ();
    type Error = Stop;
    fn serialize_key<T: Serialize + ?Sized>(&mut self, key: &T) -> Result<(), Stop> {
        // Keys are names (strings) in every settings type; anything else is shown as JSON.
        self.key = match serde_json::to_value(key) {
            Ok(serde_json::Value::String(s)) => s,
            Ok(v) => v.to_string(),
            Err(_) => "?".into(),
        };
        Ok(())
    }
    fn serialize_value<T: Serialize + ?Sized>(&mut self, value: &T) -> Result<(), Stop> {
        self.walk.under(std::mem::take(&mut self.key), value)
    }
    fn end(self) -> Result<(), Stop> {
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde::Serialize;

    #[derive(Serialize)]
    struct Inner {
        a: f64,
        b: Vec<f32>,
    }

    #[derive(Serialize)]
    #[serde(tag = "kind", rename_all = "snake_case")]
    enum Tagged {
        Noise { sigma: f64 },
    }

    #[derive(Serialize)]
    struct Outer {
        x: usize,
        inner: Inner,
        opt: Option<Inner>,
        tagged: Tagged,
    }

    fn outer() -> Outer {
        Outer {
            x: 1,
            inner: Inner {
                a: 1.0,
                b: vec![0.5, 2.0],
            },
            opt: None,
            tagged: Tagged::Noise { sigma: 0.1 },
        }
    }

    #[test]
    fn finds_the_first_non_finite_float_with_its_path() {
        assert_eq!(first_non_finite(&outer(), ""), None);
        let mut o = outer();
        o.inner.b[1] = f32::NAN;
        let x = first_non_finite(&o, "").unwrap();
        assert_eq!(x.path, "inner.b[1]");
        assert!(x.value.is_nan());
        assert_eq!(
            x.to_string(),
            "key 'inner.b[1]' = nan: must be a finite number"
        );
        let mut o = outer();
        o.opt = Some(Inner {
            a: f64::NEG_INFINITY,
            b: vec![],
        });
        assert_eq!(
            first_non_finite(&o, "cfg").unwrap().to_string(),
            "key 'cfg.opt.a' = -inf: must be a finite number"
        );
        let mut o = outer();
        o.tagged = Tagged::Noise {
            sigma: f64::INFINITY,
        };
        assert_eq!(first_non_finite(&o, "").unwrap().path, "tagged.sigma");
    }

    #[test]
    fn walks_toml_documents() {
        let doc: toml::Table =
            toml::from_str("seeds = [0]\n[rl]\noptimizer = { lr = nan }\n[[arms]]\nname = 'a'\n[[arms]]\nname = 'b'\nrl = { aux_coef = inf }\n")
                .unwrap();
        let mut arms_only = doc.clone();
        arms_only["rl"]["optimizer"]["lr"] = toml::Value::Float(1e-4);
        assert_eq!(
            first_non_finite(&arms_only, "").unwrap().path,
            "arms[1].rl.aux_coef"
        );
        let mut rl_only = doc.clone();
        rl_only["arms"][1]["rl"]["aux_coef"] = toml::Value::Float(1e-3);
        assert_eq!(
            first_non_finite(&rl_only, "").unwrap().path,
            "rl.optimizer.lr"
        );
        rl_only["rl"]["optimizer"]["lr"] = toml::Value::Float(1e-4);
        assert_eq!(first_non_finite(&rl_only, ""), None);
    }
}
