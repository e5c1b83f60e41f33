//! How a config value is read: any TOML value ([`Value`]) checked by its type's [`FromValue`]
//! inside the deserializer ([`checked`]), so a refusal carries the value's span and reads
//! "PROBLEM; allowed: WHAT IS ALLOWED" ([`Invalid`]); names ([`Named`]) and arrays ([`List`])
//! read the same way.

use std::fmt;
use std::marker::PhantomData;

use serde::Deserialize;
use serde::de::{self, Deserializer, IgnoredAny, Visitor};

/// The most characters of a configured value an error repeats.
pub const ECHO_LIMIT: usize = 200;

/// `s` quoted for an error message, cut after [`ECHO_LIMIT`] characters.
pub fn quote(s: &str) -> String {
    let count = s.chars().count();
    if count <= ECHO_LIMIT {
        return format!("{s:?}");
    }
    let head: String = s.chars().take(ECHO_LIMIT).collect();
    format!("{head:?}... ({count} characters)")
}

/// Any TOML value where one key's value belongs; a [`FromValue`] impl checks its type.
#[derive(Debug, Clone, PartialEq)]
pub enum Value {
    String(String),
    Integer(i64),
    Float,
    Boolean(bool),
    Array,
    /// An inline table or a date-time: never allowed where a value is read.
    Table,
}

impl Value {
    /// The type, as error messages name it.
    fn kind(&self) -> &'static str {
        match self {
            Value::String(_) => "a string",
            Value::Integer(_) => "an integer",
            Value::Float => "a float",
            Value::Boolean(_) => "a boolean",
            Value::Array => "an array",
            Value::Table => "a table or date-time",
        }
    }
}

/// Why one value was refused, and what the key allows. Displayed as "PROBLEM; allowed: WHAT".
#[derive(Debug, Clone, PartialEq)]
pub struct Invalid {
    problem: String,
    allowed: String,
}

impl Invalid {
    pub fn new(problem: impl fmt::Display, allowed: impl Into<String>) -> Invalid {
        Invalid {
            problem: problem.to_string(),
            allowed: allowed.into(),
        }
    }

    /// A value of another type than `expected`.
    pub fn wrong_type(expected: &str, found: &Value, allowed: impl Into<String>) -> Invalid {
        Invalid::new(
            format!("expected {expected}, found {}", found.kind()),
            allowed,
        )
    }
}

impl fmt::Display for Invalid {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}; allowed: {}", self.problem, self.allowed)
    }
}

/// A value checked as it is read: the counterpart of `TryFrom<Value>`.
pub trait FromValue: Sized {
    fn from_value(value: Value) -> Result<Self, Invalid>;
}

/// Deserializes any TOML value and checks it with [`FromValue`] inside the visitor. serde's
/// `#[serde(try_from)]` would convert only after toml's value deserializer has returned, and toml
/// then blames the enclosing key or array (`skip_namespaces = ["a", 1]` at the `[`); checked
/// here, the error carries the span of the very value.
pub fn checked<'de, D: Deserializer<'de>, T: FromValue>(d: D) -> Result<T, D::Error> {
    struct Checked<T>(PhantomData<T>);
    impl<T: FromValue> Checked<T> {
        fn check<E: de::Error>(v: Value) -> Result<T, E> {
            T::from_value(v).map_err(E::custom)
        }
    }
    impl<'de, T: FromValue> Visitor<'de> for Checked<T> {
        type Value = T;
        fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.write_str("a TOML value")
        }
        fn visit_bool<E: de::Error>(self, v: bool) -> Result<T, E> {
            Self::check(Value::Boolean(v))
        }
        fn visit_i64<E: de::Error>(self, v: i64) -> Result<T, E> {
            Self::check(Value::Integer(v))
        }
        // TOML integers are i64; a larger one is out of every range anyway.
        fn visit_u64<E: de::Error>(self, v: u64) -> Result<T, E> {
            Self::check(Value::Integer(i64::try_from(v).unwrap_or(i64::MAX)))
        }
        fn visit_i128<E: de::Error>(self, v: i128) -> Result<T, E> {
            let clamped = v.clamp(i128::from(i64::MIN), i128::from(i64::MAX));
            Self::check(Value::Integer(i64::try_from(clamped).unwrap_or(i64::MAX)))
        }
        fn visit_u128<E: de::Error>(self, _: u128) -> Result<T, E> {
            Self::check(Value::Integer(i64::MAX))
        }
        fn visit_f64<E: de::Error>(self, _: f64) -> Result<T, E> {
            Self::check(Value::Float)
        }
        fn visit_str<E: de::Error>(self, v: &str) -> Result<T, E> {
            Self::check(Value::String(v.to_string()))
        }
        fn visit_string<E: de::Error>(self, v: String) -> Result<T, E> {
            Self::check(Value::String(v))
        }
        fn visit_seq<A: de::SeqAccess<'de>>(self, mut seq: A) -> Result<T, A::Error> {
            while seq.next_element::<IgnoredAny>()?.is_some() {}
            Self::check(Value::Array)
        }
        fn visit_map<A: de::MapAccess<'de>>(self, mut map: A) -> Result<T, A::Error> {
            while map.next_entry::<IgnoredAny, IgnoredAny>()?.is_some() {}
            Self::check(Value::Table)
        }
    }
    d.deserialize_any(Checked(PhantomData))
}

/// `impl Deserialize` through [`checked`] for each type.
macro_rules! deserialize_checked {
    ($($t:ty),* $(,)?) => {$(
        impl<'de> serde::Deserialize<'de> for $t {
            fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
                $crate::config::from_value::checked(d)
            }
        }
    )*};
}
pub(crate) use deserialize_checked;

/// A string value, or the wrong-type error naming what `allowed` says.
/// The value as a string, or the wrong-type error that lists `allowed`.
pub(super) fn string(value: Value, allowed: &str) -> Result<String, Invalid> {
    match value {
        Value::String(s) => Ok(s),
        other => Err(Invalid::wrong_type("a string", &other, allowed)),
    }
}

/// An enum written as one of a fixed set of names; the names are listed once, in `NAMES`, and
/// serve parsing, errors and `as_str`.
pub trait Named: Copy + PartialEq + 'static {
    const NAMES: &'static [(&'static str, Self)];

    /// The name this value is written as.
    fn name(self) -> &'static str {
        Self::NAMES
            .iter()
            .find(|(_, v)| *v == self)
            .map_or("", |(n, _)| n)
    }
}

impl<T: Named> FromValue for T {
    fn from_value(value: Value) -> Result<T, Invalid> {
        let names: Vec<String> = T::NAMES.iter().map(|(n, _)| format!("{n:?}")).collect();
        let allowed = format!("one of {}", names.join(", "));
        let name = string(value, &allowed)?;
        T::NAMES
            .iter()
            .find(|(n, _)| *n == name)
            .map(|(_, v)| *v)
            .ok_or_else(|| Invalid::new(format!("unknown value {}", quote(&name)), allowed))
    }
}

/// What an array of `Self` is called and what each element may be, for errors.
pub trait ListElement {
    const LIST: &'static str;
    const ALLOWED: &'static str;
}

/// An array whose elements are each read as a `T` of their own, so an error points at the
/// element; anything but an array is refused with what is allowed.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct List<T>(pub Vec<T>);

impl<'de, T: Deserialize<'de> + ListElement> Deserialize<'de> for List<T> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct Elements<T>(std::marker::PhantomData<T>);
        fn wrong<T: ListElement, E: de::Error>(found: Value) -> Result<List<T>, E> {
            // Every list of ours holds strings.
            Err(E::custom(Invalid::wrong_type(
                "an array of strings",
                &found,
                T::ALLOWED,
            )))
        }
        impl<'de, T: Deserialize<'de> + ListElement> Visitor<'de> for Elements<T> {
            type Value = List<T>;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(T::LIST)
            }
            fn visit_seq<A: de::SeqAccess<'de>>(self, mut seq: A) -> Result<List<T>, A::Error> {
                let mut items = Vec::new();
                while let Some(item) = seq.next_element()? {
                    items.push(item);
                }
                Ok(List(items))
            }
            fn visit_bool<E: de::Error>(self, v: bool) -> Result<List<T>, E> {
                wrong(Value::Boolean(v))
            }
            fn visit_i64<E: de::Error>(self, v: i64) -> Result<List<T>, E> {
                wrong(Value::Integer(v))
            }
            fn visit_u64<E: de::Error>(self, _: u64) -> Result<List<T>, E> {
                wrong(Value::Integer(i64::MAX))
            }
            fn visit_f64<E: de::Error>(self, _: f64) -> Result<List<T>, E> {
                wrong(Value::Float)
            }
            fn visit_str<E: de::Error>(self, _: &str) -> Result<List<T>, E> {
                wrong(Value::String(String::new()))
            }
            fn visit_map<A: de::MapAccess<'de>>(self, mut map: A) -> Result<List<T>, A::Error> {
                while map.next_entry::<IgnoredAny, IgnoredAny>()?.is_some() {}
                wrong(Value::Table)
            }
        }
        d.deserialize_any(Elements(std::marker::PhantomData))
    }
}
