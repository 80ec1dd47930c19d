//! Ordered key/value metadata plus the typed readers model loaders use (spec §13.3).
//!
//! `ZeroPolicy` exists because families disagree about zero on purpose: qwen3
//! treats a zero-valued key like a missing one, while gemma reads legitimately
//! zero keys such as `attention.shared_kv_layers`.

use indexmap::IndexMap;

use crate::error::{GgufError, Result};
use crate::value::{Array, Value};

/// Whether a present-but-zero integer counts as a value or as absent.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ZeroPolicy {
    /// Zero is invalid (strict readers error, optional readers return `None`).
    RejectZero,
    /// Zero is a legitimate value.
    AcceptZero,
}

/// Key/value metadata in file order.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Metadata {
    map: IndexMap<String, Value>,
}

impl Metadata {
    /// An empty map with room for `n` keys.
    pub fn with_capacity(n: usize) -> Self {
        Self {
            map: IndexMap::with_capacity(n),
        }
    }

    /// Insert or replace a key (a new key goes last; a replaced key keeps its place).
    pub fn insert(&mut self, key: impl Into<String>, value: Value) -> Option<Value> {
        self.map.insert(key.into(), value)
    }

    /// Remove a key, keeping the order of the others.
    pub fn remove(&mut self, key: &str) -> Option<Value> {
        self.map.shift_remove(key)
    }

    /// Whether `key` is present.
    pub fn contains_key(&self, key: &str) -> bool {
        self.map.contains_key(key)
    }

    /// The value of `key`.
    pub fn get(&self, key: &str) -> Option<&Value> {
        self.map.get(key)
    }

    /// Number of keys.
    pub fn len(&self) -> usize {
        self.map.len()
    }

    /// Whether there are no keys.
    pub fn is_empty(&self) -> bool {
        self.map.is_empty()
    }

    /// Keys and values in file order.
    pub fn iter(&self) -> impl ExactSizeIterator<Item = (&str, &Value)> {
        self.map.iter().map(|(k, v)| (k.as_str(), v))
    }

    /// `general.architecture`, if present and a string.
    pub fn architecture(&self) -> Option<&str> {
        self.get("general.architecture").and_then(Value::as_str)
    }

    /// A UTF-8 string value; `Ok(None)` when absent, `Err` when present with another type.
    pub fn get_str(&self, key: &str) -> Result<Option<&str>> {
        match self.get(key) {
            None => Ok(None),
            Some(v) => v
                .as_str()
                .map(Some)
                .ok_or_else(|| invalid(key, "expected a UTF-8 string", v)),
        }
    }

    /// Any-width non-negative integer value as u64; `Ok(None)` when absent.
    pub fn get_u64(&self, key: &str) -> Result<Option<u64>> {
        match self.get(key) {
            None => Ok(None),
            Some(v) => match v.as_int() {
                Some(i) if !matches!(v, Value::Bool(_)) => u64::try_from(i)
                    .map(Some)
                    .map_err(|_| invalid(key, "expected a non-negative integer", v)),
                _ => Err(invalid(key, "expected an integer", v)),
            },
        }
    }

    /// An array value; `Ok(None)` when absent.
    pub fn get_array(&self, key: &str) -> Result<Option<&Array>> {
        match self.get(key) {
            None => Ok(None),
            Some(v) => v
                .as_array()
                .map(Some)
                .ok_or_else(|| invalid(key, "expected an array", v)),
        }
    }

    /// Strict integer reader for `<arch>.<suffix>`: missing, negative, non-integer,
    /// or (under [`ZeroPolicy::RejectZero`]) zero values are errors.
    pub fn meta_int(&self, arch: &str, suffix: &str, zero: ZeroPolicy) -> Result<u64> {
        let key = format!("{arch}.{suffix}");
        let v = self
            .get(&key)
            .ok_or_else(|| GgufError::MissingKey { key: key.clone() })?;
        let n = v
            .as_int()
            .filter(|_| !matches!(v, Value::Bool(_)))
            .ok_or_else(|| invalid(&key, "expected an integer", v))?;
        if n < 0 {
            return Err(invalid(&key, "must not be negative", v));
        }
        if n == 0 && zero == ZeroPolicy::RejectZero {
            return Err(invalid(&key, "must not be zero", v));
        }
        u64::try_from(n).map_err(|_| invalid(&key, "does not fit in 64 bits", v))
    }

    /// Optional integer reader: everything the strict reader rejects reads as `None`.
    pub fn meta_int_opt(&self, arch: &str, suffix: &str, zero: ZeroPolicy) -> Option<u64> {
        self.meta_int(arch, suffix, zero).ok()
    }

    /// Strict float reader for `<arch>.<suffix>` (f32 or f64 values).
    pub fn meta_float(&self, arch: &str, suffix: &str) -> Result<f32> {
        let key = format!("{arch}.{suffix}");
        let v = self
            .get(&key)
            .ok_or_else(|| GgufError::MissingKey { key: key.clone() })?;
        v.as_float()
            .map(|f| f as f32)
            .ok_or_else(|| invalid(&key, "expected a float", v))
    }

    /// Optional float reader.
    pub fn meta_float_opt(&self, arch: &str, suffix: &str) -> Option<f32> {
        self.meta_float(arch, suffix).ok()
    }

    /// A per-layer value (like llama.cpp's `get_key_or_arr`): a scalar integer/bool is
    /// broadcast to all `n_layer` layers; an array of integers/bools must have exactly
    /// `n_layer` entries. Values must fit in u32.
    pub fn per_layer_u32(&self, key: &str, n_layer: usize) -> Result<Vec<u32>> {
        let v = self
            .get(key)
            .ok_or_else(|| GgufError::MissingKey { key: key.into() })?;
        let to_u32 = |i: i128| {
            u32::try_from(i).map_err(|_| invalid(key, &format!("entry {i} does not fit in u32"), v))
        };
        match v {
            Value::Array(a) => {
                let ints = a
                    .to_ints()
                    .ok_or_else(|| invalid(key, "expected an array of integers or bools", v))?;
                if ints.len() != n_layer {
                    return Err(invalid(
                        key,
                        &format!(
                            "has {} entries but the model has {n_layer} layers",
                            ints.len()
                        ),
                        v,
                    ));
                }
                ints.into_iter().map(to_u32).collect()
            }
            scalar => {
                let i = scalar
                    .as_int()
                    .ok_or_else(|| invalid(key, "expected an integer, bool or array", v))?;
                Ok(vec![to_u32(i)?; n_layer])
            }
        }
    }
}

fn invalid(key: &str, message: &str, v: &Value) -> GgufError {
    let shown = match v {
        Value::Array(a) => format!("{} array of {}", a.item_type().name(), a.len()),
        Value::String(s) => format!(
            "string {:?}",
            String::from_utf8_lossy(&s[..s.len().min(40)])
        ),
        other => format!("{other:?}"),
    };
    GgufError::InvalidValue {
        key: key.into(),
        message: format!("{message} (found {shown})"),
    }
}

impl<'a> IntoIterator for &'a Metadata {
    type Item = (&'a String, &'a Value);
    type IntoIter = indexmap::map::Iter<'a, String, Value>;
    fn into_iter(self) -> Self::IntoIter {
        self.map.iter()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> Metadata {
        let mut m = Metadata::default();
        m.insert("arch.block_count", Value::U32(24));
        m.insert("arch.shared_kv_layers", Value::U32(0));
        m.insert("arch.neg", Value::I32(-1));
        m.insert("arch.eps", Value::F32(1e-6));
        m.insert("arch.head_count_kv", Value::U32(4));
        m.insert(
            "arch.swa",
            Value::Array(Array::Bool(vec![true, false, true])),
        );
        m
    }

    #[test]
    fn zero_valued_keys_split_by_policy() {
        let m = sample();
        assert_eq!(
            m.meta_int("arch", "block_count", ZeroPolicy::RejectZero)
                .unwrap(),
            24
        );
        assert!(matches!(
            m.meta_int("arch", "shared_kv_layers", ZeroPolicy::RejectZero),
            Err(GgufError::InvalidValue { .. })
        ));
        assert_eq!(
            m.meta_int("arch", "shared_kv_layers", ZeroPolicy::AcceptZero)
                .unwrap(),
            0
        );
        assert_eq!(
            m.meta_int_opt("arch", "missing", ZeroPolicy::AcceptZero),
            None
        );
        assert!(matches!(
            m.meta_int("arch", "missing", ZeroPolicy::AcceptZero),
            Err(GgufError::MissingKey { .. })
        ));
        assert_eq!(m.meta_int_opt("arch", "neg", ZeroPolicy::AcceptZero), None);
        assert!((m.meta_float("arch", "eps").unwrap() - 1e-6).abs() < 1e-12);
        assert!(m.meta_float("arch", "block_count").is_err());
    }

    #[test]
    fn per_layer_broadcasts_scalars_and_checks_arrays() {
        let m = sample();
        assert_eq!(
            m.per_layer_u32("arch.head_count_kv", 3).unwrap(),
            vec![4, 4, 4]
        );
        assert_eq!(m.per_layer_u32("arch.swa", 3).unwrap(), vec![1, 0, 1]);
        assert!(m.per_layer_u32("arch.swa", 4).is_err());
        assert!(m.per_layer_u32("arch.eps", 4).is_err());
    }
}
