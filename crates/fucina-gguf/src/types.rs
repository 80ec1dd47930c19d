//! Type ids of the GGUF format: metadata value types and ggml tensor types, as data.

use std::fmt;

/// The type tag of a metadata value (`gguf_type` in ggml).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[repr(u32)]
#[allow(missing_docs)]
pub enum ValueType {
    U8 = 0,
    I8 = 1,
    U16 = 2,
    I16 = 3,
    U32 = 4,
    I32 = 5,
    F32 = 6,
    Bool = 7,
    String = 8,
    Array = 9,
    U64 = 10,
    I64 = 11,
    F64 = 12,
}

impl ValueType {
    /// Decode a type id; `None` for ids the format does not define.
    pub fn from_u32(id: u32) -> Option<Self> {
        use ValueType::*;
        Some(match id {
            0 => U8,
            1 => I8,
            2 => U16,
            3 => I16,
            4 => U32,
            5 => I32,
            6 => F32,
            7 => Bool,
            8 => String,
            9 => Array,
            10 => U64,
            11 => I64,
            12 => F64,
            _ => return None,
        })
    }

    /// Fixed on-disk size of a scalar of this type; `None` for strings and arrays.
    pub fn scalar_size(self) -> Option<usize> {
        use ValueType::*;
        match self {
            U8 | I8 | Bool => Some(1),
            U16 | I16 => Some(2),
            U32 | I32 | F32 => Some(4),
            U64 | I64 | F64 => Some(8),
            String | Array => None,
        }
    }

    /// The smallest number of bytes one element of this type can occupy on disk
    /// (used to bound allocations by the bytes that remain in the file).
    pub fn min_size(self) -> usize {
        match self {
            ValueType::String => 8,    // u64 length
            ValueType::Array => 4 + 8, // item type + count
            other => other.scalar_size().unwrap_or(1),
        }
    }

    /// gguf-py's name for the type (`UINT8`, `FLOAT32`, ...).
    pub fn name(self) -> &'static str {
        use ValueType::*;
        match self {
            U8 => "UINT8",
            I8 => "INT8",
            U16 => "UINT16",
            I16 => "INT16",
            U32 => "UINT32",
            I32 => "INT32",
            F32 => "FLOAT32",
            Bool => "BOOL",
            String => "STRING",
            Array => "ARRAY",
            U64 => "UINT64",
            I64 => "INT64",
            F64 => "FLOAT64",
        }
    }
}

/// Facts about one ggml tensor type.
struct TypeInfo {
    id: u32,
    name: &'static str,
    /// Elements per block.
    block_size: u32,
    /// Bytes per block.
    type_size: u32,
}

macro_rules! ggml_types {
    ($( $variant:ident = $id:literal, $name:literal, $block:expr, $bytes:expr; )*) => {
        /// A ggml tensor element type (`ggml_type`), with its block geometry.
        ///
        /// The table mirrors `type_traits` in ggml (and `GGML_QUANT_SIZES` in gguf-py, which
        /// lags ggml: it lacks Q2_0 and still sizes Q8_1 at 40 bytes).
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
        #[repr(u32)]
        #[allow(missing_docs, non_camel_case_types)]
        pub enum GgmlType { $( $variant = $id, )* }

        const TYPE_TABLE: &[(GgmlType, TypeInfo)] = &[
            $( (GgmlType::$variant, TypeInfo { id: $id, name: $name, block_size: $block, type_size: $bytes }), )*
        ];
    };
}

const QK_K: u32 = 256;

ggml_types! {
    F32 = 0, "F32", 1, 4;
    F16 = 1, "F16", 1, 2;
    Q4_0 = 2, "Q4_0", 32, 2 + 16;
    Q4_1 = 3, "Q4_1", 32, 2 + 2 + 16;
    Q5_0 = 6, "Q5_0", 32, 2 + 4 + 16;
    Q5_1 = 7, "Q5_1", 32, 2 + 2 + 4 + 16;
    Q8_0 = 8, "Q8_0", 32, 2 + 32;
    // ggml's block_q8_1 is f16 d + f16 s + 32 quants (gguf-py's table still says 40).
    Q8_1 = 9, "Q8_1", 32, 2 + 2 + 32;
    Q2_K = 10, "Q2_K", QK_K, 2 + 2 + QK_K / 16 + QK_K / 4;
    Q3_K = 11, "Q3_K", QK_K, 2 + QK_K / 4 + QK_K / 8 + 12;
    Q4_K = 12, "Q4_K", QK_K, 2 + 2 + QK_K / 2 + 12;
    Q5_K = 13, "Q5_K", QK_K, 2 + 2 + QK_K / 2 + QK_K / 8 + 12;
    Q6_K = 14, "Q6_K", QK_K, 2 + QK_K / 2 + QK_K / 4 + QK_K / 16;
    Q8_K = 15, "Q8_K", QK_K, 4 + QK_K + QK_K / 8;
    IQ2_XXS = 16, "IQ2_XXS", QK_K, 2 + QK_K / 4;
    IQ2_XS = 17, "IQ2_XS", QK_K, 2 + QK_K / 4 + QK_K / 32;
    IQ3_XXS = 18, "IQ3_XXS", QK_K, 2 + QK_K / 4 + QK_K / 8;
    IQ1_S = 19, "IQ1_S", QK_K, 2 + QK_K / 8 + QK_K / 16;
    IQ4_NL = 20, "IQ4_NL", 32, 2 + 16;
    IQ3_S = 21, "IQ3_S", QK_K, 2 + QK_K / 4 + QK_K / 8 + QK_K / 32 + 4;
    IQ2_S = 22, "IQ2_S", QK_K, 2 + QK_K / 4 + QK_K / 16;
    IQ4_XS = 23, "IQ4_XS", QK_K, 2 + 2 + QK_K / 2 + QK_K / 64;
    I8 = 24, "I8", 1, 1;
    I16 = 25, "I16", 1, 2;
    I32 = 26, "I32", 1, 4;
    I64 = 27, "I64", 1, 8;
    F64 = 28, "F64", 1, 8;
    IQ1_M = 29, "IQ1_M", QK_K, QK_K / 8 + QK_K / 16 + QK_K / 32;
    BF16 = 30, "BF16", 1, 2;
    TQ1_0 = 34, "TQ1_0", QK_K, 2 + 4 * 13;
    TQ2_0 = 35, "TQ2_0", QK_K, 2 + 64;
    MXFP4 = 39, "MXFP4", 32, 1 + 16;
    NVFP4 = 40, "NVFP4", 64, 4 + 32;
    Q1_0 = 41, "Q1_0", 128, 2 + 16;
    Q2_0 = 42, "Q2_0", 64, 2 + 16;
}

impl GgmlType {
    fn info(self) -> &'static TypeInfo {
        &TYPE_TABLE
            .iter()
            .find(|(t, _)| *t == self)
            .expect("every GgmlType variant has a table row")
            .1
    }

    /// Decode a type id; `None` for ids ggml does not (or no longer) define.
    pub fn from_u32(id: u32) -> Option<Self> {
        TYPE_TABLE.iter().find(|(_, i)| i.id == id).map(|(t, _)| *t)
    }

    /// Every known type, in id order.
    pub fn all() -> impl Iterator<Item = GgmlType> {
        TYPE_TABLE.iter().map(|(t, _)| *t)
    }

    /// Look a type up by its ggml name (`"Q4_K"`, case-insensitive).
    pub fn from_name(name: &str) -> Option<Self> {
        TYPE_TABLE
            .iter()
            .find(|(_, i)| i.name.eq_ignore_ascii_case(name))
            .map(|(t, _)| *t)
    }

    /// The numeric id stored in GGUF files.
    pub fn id(self) -> u32 {
        self as u32
    }

    /// The ggml name (`"Q4_K"`).
    pub fn name(self) -> &'static str {
        self.info().name
    }

    /// Elements per block (1 for plain types).
    pub fn block_size(self) -> u64 {
        u64::from(self.info().block_size)
    }

    /// Bytes per block.
    pub fn type_size(self) -> u64 {
        u64::from(self.info().type_size)
    }

    /// Whether this is a block-quantized type (not a plain float/int type).
    pub fn is_quantized(self) -> bool {
        self.block_size() > 1
    }

    /// Bytes taken by a tensor of these dims (`ne`, fastest-varying first), or
    /// `None` when the first dim is not a whole number of blocks or the size overflows u64.
    pub fn tensor_bytes(self, dims: &[u64]) -> Option<u64> {
        let (first, rest) = match dims.split_first() {
            Some(split) => split,
            None => return Some(self.type_size()), // a 0-d tensor holds one element
        };
        if first % self.block_size() != 0 {
            return None;
        }
        let mut bytes = (first / self.block_size()).checked_mul(self.type_size())?;
        for &d in rest {
            bytes = bytes.checked_mul(d)?;
        }
        Some(bytes)
    }
}

impl fmt::Display for GgmlType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_round_trip_and_table_is_consistent() {
        for t in GgmlType::all() {
            assert_eq!(GgmlType::from_u32(t.id()), Some(t));
            assert_eq!(GgmlType::from_name(t.name()), Some(t));
            assert!(t.type_size() > 0);
        }
        assert_eq!(GgmlType::from_u32(4), None, "Q4_2 was removed from ggml");
        assert_eq!(
            GgmlType::Q4_K.tensor_bytes(&[1024, 2048]),
            Some(1024 / 256 * 144 * 2048)
        );
        assert_eq!(GgmlType::Q4_K.tensor_bytes(&[100, 2]), None);
    }
}
