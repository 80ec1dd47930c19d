//! How a JSON Schema is read before llguidance compiles it.
//!
//! Three layers, applied in this order:
//!
//! 1. **Exact repairs** (always): what schemas in the wild write in the syntax of
//!    JavaScript but llguidance reads in Rust's. A `pattern` is an ECMA-262 regex: a `{`
//!    that starts no quantifier, a `[` inside a class and `\0` are literals there and
//!    are escaped for Rust's regex syntax; a `$ref` with characters a URI may not hold
//!    (`#/definitions/Record<string,any>`, as typescript-json-schema writes them) is
//!    percent-encoded. The schema means what it meant.
//! 2. **llama.cpp's reading** where it is tighter than JSON Schema's: an object that
//!    lists `properties` and says nothing of others allows no others (a model would
//!    otherwise invent keys without end), except where its properties combine with
//!    another schema's (an `allOf` member, the `anyOf` / `oneOf` branches refining an
//!    object that lists properties itself: closing those would forbid the keys the
//!    others bring, and make `required` unsatisfiable); an `allOf` of plain objects
//!    (local `$ref`s to them included) is merged into one object, as llama.cpp merges
//!    it; numbers get digit bounds (llama.cpp's JSON grammars allow at most 16 integral
//!    and 16 fractional digits): an integer without a bound gets ±(10^16 − 1), a number
//!    without `multipleOf` gets `multipleOf: 1e-10` (the finest step llguidance
//!    represents), so a model cannot run on with digits forever.
//! 3. **Lenient fallbacks**, only for a schema the strict compile refused (and never for
//!    one whose `x-guidance` sets `lenient`, which is OpenAI-style `strict`): llguidance's
//!    lenient mode (it ignores keywords and formats it does not implement), patterns no
//!    regex engine here runs (look-around, back-references, word boundaries) dropped,
//!    `$ref`s to other documents (nothing is fetched) read as any value, and, if the
//!    schema still fails for a reference cycle through a `$ref` with sibling keywords,
//!    those siblings dropped (draft 7 and earlier ignore them anyway). Each fallback
//!    is named in the warning the compile returns.

use serde_json::{json, Map, Value};

/// The largest magnitude llama.cpp's JSON grammars write for an integer (16 digits).
pub(crate) const MAX_DIGITS_INT: i64 = 9_999_999_999_999_999;

/// The finest `multipleOf` llguidance compiles (1e-11 and below exceed its digit limit).
pub(crate) const NUMBER_STEP: f64 = 1e-10;

/// The keywords that hold one schema (`items` in older drafts: a list of them).
const ONE_SCHEMA: [&str; 11] = [
    "items",
    "additionalItems",
    "additionalProperties",
    "contains",
    "not",
    "if",
    "then",
    "else",
    "propertyNames",
    "unevaluatedProperties",
    "unevaluatedItems",
];

/// How many `$ref` hops a bare reference is followed through to the schema it leads to.
const REF_HOPS: usize = 8;

/// A JSON Schema as [`Grammar::JsonSchema`](crate::Grammar::JsonSchema) compiles it:
/// repaired and read as llama.cpp reads schemas (the module doc) and with the compact
/// separators in its `x-guidance` key (unless the schema sets its own). What a Lark
/// grammar's `%json { ... }` should embed to constrain a value the same way (a tool
/// call's arguments).
pub fn compiled_schema(mut v: Value) -> Value {
    let compact = json!({
        "whitespace_flexible": false,
        "item_separator": ", ",
        "key_separator": ": ",
        // llama.cpp reads `oneOf` as `anyOf` (exclusivity is not checked).
        "coerce_one_of": true,
    });
    repair(&mut v);
    normalize(&mut v);
    match &mut v {
        Value::Object(m) => {
            // The schema's own options win; the rest are the defaults.
            if let (Value::Object(g), Value::Object(defaults)) =
                (m.entry("x-guidance").or_insert(json!({})), compact)
            {
                for (k, d) in defaults {
                    g.entry(k).or_insert(d);
                }
            }
        }
        Value::Bool(true) => v = json!({ "x-guidance": compact }),
        _ => {}
    }
    v
}

/// [`compiled_schema`] read leniently from the start (the module doc's fallbacks, look-around
/// loosened; nothing is named): for a schema embedded where no warning can reach anyone,
/// a tool's arguments in a forced call, which llama.cpp constrains as leniently. A schema
/// whose `x-guidance` sets `lenient` is compiled as it says.
pub fn lenient_compiled_schema(v: Value) -> Value {
    let how = Lenience {
        loosen_patterns: true,
        bare_refs: false,
    };
    match lenient_schema(&v, how) {
        Some((lenient, _)) => lenient,
        None => compiled_schema(v),
    }
}

// --- 1. exact repairs ------------------------------------------------------------------

/// Every `pattern`, `patternProperties` key and `$ref` of the schema in the syntax
/// llguidance reads, meaning what it meant.
fn repair(v: &mut Value) {
    walk_document(v, &mut |m| {
        if let Some(Value::String(p)) = m.get_mut("pattern") {
            *p = ecma_regex(p);
        }
        if let Some(Value::Object(pp)) = m.get_mut("patternProperties") {
            if pp.keys().any(|k| ecma_regex(k) != *k) {
                *pp = std::mem::take(pp)
                    .into_iter()
                    .map(|(k, s)| (ecma_regex(&k), s))
                    .collect();
            }
        }
        if let Some(Value::String(r)) = m.get_mut("$ref") {
            *r = uri_escaped(r);
            // `#definitions/x`: a JSON pointer missing its leading `/` (an anchor
            // cannot hold a `/`).
            if let Some((doc, frag)) = r.split_once('#') {
                if frag.contains('/') && !frag.starts_with('/') {
                    *r = format!("{doc}#/{frag}");
                }
            }
        }
        if let Some(Value::String(d)) = m.get_mut("$schema") {
            if let Some(known) = known_draft(d) {
                *d = known.into();
            }
        }
        spelled_format(m);
    });
}

/// A `format` that names what another keyword says (OpenAPI's `int32` / `int64` / ...,
/// `byte`, pydantic's `uuid4`) written as that keyword, and one that asserts nothing of a
/// JSON value (`float`, `double`, `password`, `binary`) removed: llguidance knows only
/// JSON Schema's own formats. The schema accepts what it accepted, but for `date` and
/// `date-time`, now held to the calendar (their pattern, where the schema has none).
fn spelled_format(m: &mut Map<String, Value>) {
    let Some(format) = m.get("format").and_then(Value::as_str).map(str::to_string) else {
        return;
    };
    let hex = |n: usize| format!("[0-9a-fA-F]{{{n}}}");
    let pattern = match format.as_str() {
        "int8" | "int16" | "int32" | "int64" | "uint8" | "uint16" | "uint32" | "uint64" => {
            let bits: u32 = format
                .trim_start_matches(['u', 'i', 'n', 't'])
                .parse()
                .unwrap_or(64);
            let (lo, hi) = if format.starts_with('u') {
                (0i128, (1i128 << bits) - 1)
            } else {
                (-(1i128 << (bits - 1)), (1i128 << (bits - 1)) - 1)
            };
            let bound = |v: i128| {
                json!(v.clamp(-i128::from(MAX_DIGITS_INT), i128::from(MAX_DIGITS_INT)) as i64)
            };
            m.entry("minimum").or_insert_with(|| bound(lo));
            m.entry("maximum").or_insert_with(|| bound(hi));
            None
        }
        "uuid1" | "uuid2" | "uuid3" | "uuid4" | "uuid5" => Some(format!(
            "^{}-{}-{}{}-{}-{}$",
            hex(8),
            hex(4),
            &format[4..],
            hex(3),
            hex(4),
            hex(12)
        )),
        "byte" => Some("^(?:[A-Za-z0-9+/]{4})*(?:[A-Za-z0-9+/]{2}==|[A-Za-z0-9+/]{3}=)?$".into()),
        // llguidance's own `date` / `date-time` take year 0000 and February 29 of every
        // year; validators (Python's `date.fromisoformat`, rfc3339-validator) refuse both.
        "date" if !m.contains_key("pattern") => Some(format!("^{}$", calendar_date())),
        "date-time" if !m.contains_key("pattern") => Some(format!(
            "^{}[tT](?:[01][0-9]|2[0-3]):[0-5][0-9]:(?:[0-5][0-9]|60)(?:\\.[0-9]+)?\
             (?:[zZ]|[+-](?:[01][0-9]|2[0-3]):[0-5][0-9])$",
            calendar_date()
        )),
        "float" | "double" | "decimal" | "password" | "binary" => None,
        _ => return,
    };
    m.remove("format");
    if let Some(p) = pattern {
        m.entry("pattern").or_insert(Value::String(p));
    }
}

/// RFC 3339's `full-date` with its calendar: days by month, February 29 in leap years
/// only (Gregorian: every fourth year but centuries not divisible by 400), years 0001-9999.
fn calendar_date() -> String {
    let year = "(?:[0-9]{3}[1-9]|[0-9]{2}[1-9]0|[0-9][1-9]00|[1-9]000)";
    let leap = "(?:[0-9]{2}(?:0[48]|[2468][048]|[13579][26])|(?:0[48]|[2468][048]|[13579][26])00)";
    format!(
        "(?:{year}-(?:(?:0[13578]|1[02])-(?:0[1-9]|[12][0-9]|3[01])\
         |(?:0[469]|11)-(?:0[1-9]|[12][0-9]|30)|02-(?:0[1-9]|1[0-9]|2[0-8]))|{leap}-02-29)"
    )
}

/// The URI a JSON Schema draft is known by, for a `$schema` that names one in another
/// spelling (`https://json-schema.org/draft-07/schema`, `.../draft/2019-09/schema#`,
/// `http://json-schema.org/schema` for the latest): read by the URI the compiler knows
/// instead of fetched (nothing is).
fn known_draft(uri: &str) -> Option<&'static str> {
    const DRAFTS: [(&str, &str); 5] = [
        ("draft-04", "http://json-schema.org/draft-04/schema#"),
        ("draft-06", "http://json-schema.org/draft-06/schema#"),
        ("draft-07", "http://json-schema.org/draft-07/schema#"),
        ("2019-09", "https://json-schema.org/draft/2019-09/schema"),
        ("2020-12", "https://json-schema.org/draft/2020-12/schema"),
    ];
    if !uri.contains("json-schema.org") && !uri.contains("json-schema-org") {
        return None;
    }
    if let Some((_, known)) = DRAFTS.iter().find(|(tag, _)| uri.contains(tag)) {
        return Some(known);
    }
    let bare = uri.trim_end_matches('#').trim_end_matches('/');
    bare.ends_with("json-schema.org/schema")
        .then_some("https://json-schema.org/draft/2020-12/schema")
}

/// An ECMA-262 regex (what JSON Schema's `pattern` is) in Rust's regex syntax, with the
/// same meaning: outside a class, a `{` that starts no `{n}`, `{n,}` or `{n,m}`
/// quantifier is a literal; inside one, `[` and the doubled `&&`, `~~` (Rust's set
/// operations) are literals; `\0` not followed by a digit is NUL; `\cX` is a control
/// character. Everything else is copied as written.
pub(crate) fn ecma_regex(p: &str) -> String {
    let c: Vec<char> = p.chars().collect();
    let mut out = String::with_capacity(p.len() + 4);
    let (mut i, mut class) = (0, false);
    while i < c.len() {
        let ch = c[i];
        if ch == '\\' && i + 1 < c.len() {
            let e = c[i + 1];
            if e == '0' && !c.get(i + 2).is_some_and(char::is_ascii_digit) {
                out.push_str("\\x00");
            } else if e == 'c' && c.get(i + 2).is_some_and(char::is_ascii_alphabetic) {
                out.push_str(&format!("\\x{:02X}", (c[i + 2] as u8) % 32));
                i += 1;
            } else if matches!(e, 'p' | 'P' | 'u' | 'x') && c.get(i + 2) == Some(&'{') {
                // `\p{L}`, `\u{1F600}`: the braces are the escape's.
                let len = c[i..]
                    .iter()
                    .position(|&x| x == '}')
                    .map_or(c.len() - i, |p| p + 1);
                out.extend(&c[i..i + len]);
                i += len;
                continue;
            } else {
                out.push(ch);
                out.push(e);
            }
            i += 2;
            continue;
        }
        if class {
            match ch {
                ']' => class = false,
                '[' => {
                    out.push_str("\\[");
                    i += 1;
                    continue;
                }
                '&' | '~' if c.get(i + 1) == Some(&ch) => {
                    out.push('\\');
                    out.push(ch);
                    out.push('\\');
                    out.push(ch);
                    i += 2;
                    continue;
                }
                _ => {}
            }
            out.push(ch);
            i += 1;
            continue;
        }
        match ch {
            '[' => {
                class = true;
                out.push('[');
                i += 1;
                // A `]` first in the class: ECMA's empty class `[]` or `[^]` never
                // occurs in practice; Rust reads a leading `]` as a literal, as most do.
                if c.get(i) == Some(&'^') {
                    out.push('^');
                    i += 1;
                }
                if c.get(i) == Some(&']') {
                    out.push_str("\\]");
                    i += 1;
                }
                continue;
            }
            '{' if quantifier_at(&c[i..]) => {
                // Copied whole, so its `}` stays a quantifier's.
                let len = c[i..].iter().position(|&x| x == '}').map_or(1, |p| p + 1);
                out.extend(&c[i..i + len]);
                i += len;
                continue;
            }
            '{' | '}' => {
                out.push('\\');
                out.push(ch);
            }
            _ => out.push(ch),
        }
        i += 1;
    }
    out
}

/// Whether `c` (starting at a `{`) is a quantifier `{n}`, `{n,}` or `{n,m}`.
fn quantifier_at(c: &[char]) -> bool {
    let mut i = 1;
    let digits = |i: &mut usize| {
        let s = *i;
        while c.get(*i).is_some_and(char::is_ascii_digit) {
            *i += 1;
        }
        *i > s
    };
    if !digits(&mut i) {
        return false;
    }
    if c.get(i) == Some(&',') {
        i += 1;
        digits(&mut i);
    }
    c.get(i) == Some(&'}')
}

/// `r` with every character a URI reference may not hold percent-encoded (existing
/// `%XX` escapes kept): JSON Schema resolves the fragment after percent-decoding it, so
/// the reference points where it pointed.
fn uri_escaped(r: &str) -> String {
    const KEEP: &str = "-._~:/?#[]@!$&'()*+,;=";
    let b = r.as_bytes();
    let mut out = String::with_capacity(r.len());
    let mut first_hash = true;
    for (i, &x) in b.iter().enumerate() {
        let escape_ok = x == b'%'
            && b.get(i + 1).is_some_and(u8::is_ascii_hexdigit)
            && b.get(i + 2).is_some_and(u8::is_ascii_hexdigit);
        let hash_ok = x == b'#' && std::mem::take(&mut first_hash);
        if x.is_ascii_alphanumeric()
            || escape_ok
            || hash_ok
            || (x != b'#' && KEEP.as_bytes().contains(&x))
        {
            out.push(x as char);
        } else {
            out.push_str(&format!("%{x:02X}"));
        }
    }
    out
}

// --- 2. llama.cpp's reading ------------------------------------------------------------

/// llama.cpp's reading of a schema, where it is tighter than JSON Schema's (module doc).
pub(crate) fn normalize(v: &mut Value) {
    let root = v.clone();
    let mut reading = Reading {
        root: &root,
        inlined: 0,
    };
    reading.node(v, true);
}

/// How many `$ref`s one schema may have copied in place (module doc): a cycle of
/// combined references stops there, left as references.
const MAX_INLINED: usize = 256;

/// One document's normalisation: the schema as written (what local `$ref`s point to)
/// and how many references were copied in place so far.
struct Reading<'a> {
    root: &'a Value,
    inlined: usize,
}

impl Reading<'_> {
    /// `close`: whether an object listing `properties` is closed here (not where its
    /// properties combine with another schema's: an `allOf` member, and the branches of
    /// an `anyOf` / `oneOf` in such a place or refining an object that lists
    /// properties). Where an object is not closed, a `$ref` to one is copied in place,
    /// so that the copy stays open while the definition is closed where it stands
    /// alone.
    fn node(&mut self, v: &mut Value, close: bool) {
        if !close {
            self.inline_ref(v);
        }
        let Value::Object(m) = v else {
            return;
        };
        merge_object_all_of(m, self.root);
        structural_type(m);
        digit_bounds(m);
        let open_keys = [
            "additionalProperties",
            "patternProperties",
            "unevaluatedProperties",
        ];
        let lists_properties = m.get("properties").is_some_and(Value::is_object);
        let declared_open = open_keys.iter().any(|k| m.contains_key(*k));
        // Branches that spell out whole objects take this object's keys and are closed
        // themselves; this object is then open (its branches decide).
        let refined = close && lists_properties && !declared_open && self.refine_branches(m);
        if lists_properties && !declared_open {
            // An open object says so: llguidance's merge of combined schemas reads a
            // missing `additionalProperties` as closed.
            m.insert(
                "additionalProperties".into(),
                Value::Bool(!close || refined),
            );
            if close && !refined {
                allow_required(m);
            }
        }
        let branches_close = close && (!lists_properties || refined);
        for (k, child) in m.iter_mut() {
            match k.as_str() {
                // Maps from names to schemas.
                "properties" | "patternProperties" | "$defs" | "definitions"
                | "dependentSchemas" => {
                    if let Value::Object(map) = child {
                        map.values_mut().for_each(|x| self.node(x, true));
                    }
                }
                // Lists of schemas.
                "prefixItems" => self.each(child, true),
                "anyOf" | "oneOf" => self.each(child, branches_close),
                "allOf" => self.each(child, false),
                // One schema (or, for `items` in older drafts, a list of them).
                k if ONE_SCHEMA.contains(&k) => match child {
                    Value::Array(_) => self.each(child, true),
                    other => self.node(other, true),
                },
                _ => {}
            }
        }
    }

    fn each(&mut self, list: &mut Value, close: bool) {
        if let Value::Array(list) = list {
            list.iter_mut().for_each(|x| self.node(x, close));
        }
    }

    /// A bare local `$ref` (annotations beside it at most) replaced by a copy of the
    /// object schema it leads to.
    fn inline_ref(&mut self, v: &mut Value) {
        if self.inlined >= MAX_INLINED {
            return;
        }
        if let Some(target) = ref_target(self.root, v).filter(|t| t.is_object()) {
            *v = target.clone();
            self.inlined += 1;
        }
    }

    /// The `anyOf` / `oneOf` branches of object `m` (which lists properties) that spell
    /// out a whole object (a local `$ref` to one copied in place) given `m`'s property
    /// names too, so that closing each allows what `m` lists; whether any was.
    fn refine_branches(&mut self, m: &mut Map<String, Value>) -> bool {
        let names: Vec<String> = match m.get("properties") {
            Some(Value::Object(p)) => p.keys().cloned().collect(),
            _ => return false,
        };
        let mut refined = false;
        for key in ["anyOf", "oneOf"] {
            let Some(Value::Array(branches)) = m.get_mut(key) else {
                continue;
            };
            for b in branches.iter_mut() {
                let mut candidate = ref_target(self.root, b)
                    .cloned()
                    .unwrap_or_else(|| b.clone());
                if !whole_object(&candidate)
                    || self.inlined >= MAX_INLINED && b.get("$ref").is_some()
                {
                    continue;
                }
                if b.get("$ref").is_some() {
                    self.inlined += 1;
                }
                let Value::Object(c) = &mut candidate else {
                    continue;
                };
                let Value::Object(props) = c.entry("properties").or_insert_with(|| json!({}))
                else {
                    continue;
                };
                for n in &names {
                    props.entry(n.clone()).or_insert_with(|| json!({}));
                }
                *b = candidate;
                refined = true;
            }
        }
        refined
    }
}

/// The schema a bare local `$ref` node (annotations beside it at most) leads to,
/// followed through up to [`REF_HOPS`] references.
fn ref_target<'a>(root: &'a Value, v: &Value) -> Option<&'a Value> {
    const ANNOTATIONS: [&str; 4] = ["title", "description", "$comment", "$ref"];
    let bare = |x: &Value| {
        x.as_object().is_some_and(|o| {
            o.contains_key("$ref") && o.keys().all(|k| ANNOTATIONS.contains(&k.as_str()))
        })
    };
    if !bare(v) {
        return None;
    }
    let mut at = local_target(root, v.get("$ref")?.as_str()?)?;
    for _ in 0..REF_HOPS {
        if !bare(at) {
            return Some(at);
        }
        at = local_target(root, at.get("$ref")?.as_str()?)?;
    }
    None
}

/// Whether `v` describes a whole object by its own keywords: an object schema (no
/// other `type`) that neither refers elsewhere nor combines schemas nor says what
/// other keys may be.
fn whole_object(v: &Value) -> bool {
    const NOT: [&str; 8] = [
        "$ref",
        "allOf",
        "anyOf",
        "oneOf",
        "additionalProperties",
        "patternProperties",
        "unevaluatedProperties",
        "$dynamicRef",
    ];
    v.as_object().is_some_and(|o| {
        o.get("type").is_none_or(|t| t == "object")
            && o.get("properties").is_none_or(Value::is_object)
            && !NOT.iter().any(|k| o.contains_key(*k))
            && (o.contains_key("properties") || o.contains_key("required"))
    })
}

/// llama.cpp's reading of a schema without `type` that uses keywords of one type only:
/// `properties` (or `required`, `additionalProperties`, ...) make it an object, `items` an
/// array, `pattern` / `minLength` / `maxLength` a string. JSON Schema would let any other
/// type through, and a model takes that door (a bare number, digits without end).
fn structural_type(m: &mut Map<String, Value>) {
    const DECIDED: [&str; 9] = [
        "type", "enum", "const", "$ref", "anyOf", "oneOf", "allOf", "not", "if",
    ];
    const OBJECT: [&str; 6] = [
        "properties",
        "patternProperties",
        "additionalProperties",
        "required",
        "minProperties",
        "maxProperties",
    ];
    const ARRAY: [&str; 5] = ["items", "prefixItems", "minItems", "maxItems", "contains"];
    const STRING: [&str; 3] = ["pattern", "minLength", "maxLength"];
    if DECIDED.iter().any(|k| m.contains_key(*k)) {
        return;
    }
    let has = |keys: &[&str]| keys.iter().any(|k| m.contains_key(*k));
    let t = match (has(&OBJECT), has(&ARRAY), has(&STRING)) {
        (true, false, false) => "object",
        (false, true, false) => "array",
        (false, false, true) => "string",
        _ => return,
    };
    m.insert("type".into(), json!(t));
}

/// Digit bounds on numbers (module doc): an integer or number without a bound gets
/// ±(10^16 − 1) (a bound beyond that is brought in to it), a number without
/// `multipleOf` gets [`NUMBER_STEP`]. Also where `type` is a list naming them.
fn digit_bounds(m: &mut Map<String, Value>) {
    let types: Vec<&str> = match m.get("type") {
        Some(Value::String(t)) => vec![t.as_str()],
        Some(Value::Array(list)) => list.iter().filter_map(Value::as_str).collect(),
        _ => return,
    };
    let number = types.contains(&"number");
    if !number && !types.contains(&"integer") {
        return;
    }
    let cap = MAX_DIGITS_INT as f64;
    let bound = |v: Option<&Value>| v.and_then(Value::as_f64);
    let (lo, hi) = (bound(m.get("minimum")), bound(m.get("maximum")));
    let (xlo, xhi) = (
        bound(m.get("exclusiveMinimum")),
        bound(m.get("exclusiveMaximum")),
    );
    if lo.or(xlo).is_none_or(|v| v < -cap) && hi.or(xhi).is_none_or(|v| v >= -cap) {
        m.remove("exclusiveMinimum");
        m.insert("minimum".into(), json!(-MAX_DIGITS_INT));
    }
    if hi.or(xhi).is_none_or(|v| v > cap) && lo.or(xlo).is_none_or(|v| v <= cap) {
        m.remove("exclusiveMaximum");
        m.insert("maximum".into(), json!(MAX_DIGITS_INT));
    }
    if number {
        m.entry("multipleOf").or_insert(json!(NUMBER_STEP));
    }
}

/// The names a closed object `m` requires without listing them, listed (any value):
/// JSON Schema's open object allowed them, and closing it must not make the object
/// unsatisfiable.
fn allow_required(m: &mut Map<String, Value>) {
    let Some(Value::Array(required)) = m.get("required") else {
        return;
    };
    let names: Vec<String> = required
        .iter()
        .filter_map(|r| r.as_str().map(str::to_string))
        .collect();
    if let Some(Value::Object(props)) = m.get_mut("properties") {
        for n in names {
            props.entry(n).or_insert_with(|| json!({}));
        }
    }
}

/// The schema a local `$ref` (`#/...`, percent-encoded or not) points to in `root`.
fn local_target<'a>(root: &'a Value, r: &str) -> Option<&'a Value> {
    let pointer = r.strip_prefix('#')?;
    if pointer.is_empty() {
        return Some(root);
    }
    root.pointer(&percent_decoded(pointer)?)
}

fn percent_decoded(s: &str) -> Option<String> {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'%' && i + 2 < b.len() {
            let hex = std::str::from_utf8(&b[i + 1..i + 3]).ok()?;
            out.push(u8::from_str_radix(hex, 16).ok()?);
            i += 3;
        } else {
            out.push(b[i]);
            i += 1;
        }
    }
    String::from_utf8(out).ok()
}

/// An `allOf` of plain object schemas (properties and required lists only, or local
/// `$ref`s to such) merged into its parent, as llama.cpp merges them: the object then
/// lists every member's properties and, like any object listing properties, allows no
/// others.
fn merge_object_all_of(m: &mut Map<String, Value>, root: &Value) {
    const PLAIN: [&str; 7] = [
        "type",
        "properties",
        "required",
        "title",
        "description",
        "$comment",
        "additionalProperties",
    ];
    let Some(Value::Array(members)) = m.get("allOf") else {
        return;
    };
    let plain = |x: &Value| {
        x.as_object().is_some_and(|o| {
            o.keys().all(|k| PLAIN.contains(&k.as_str()))
                && o.get("type").is_none_or(|t| t == "object")
                && o.get("properties").is_none_or(Value::is_object)
                && o.get("required").is_none_or(Value::is_array)
                && o.get("additionalProperties").is_none_or(|a| a == false)
        })
    };
    // A member, or the plain object its local `$ref`s lead to.
    let resolve = |x: &Value| {
        let target = if plain(x) {
            Some(x)
        } else {
            ref_target(root, x)
        };
        target.filter(|t| plain(t)).cloned()
    };
    let Some(resolved) = members.iter().map(resolve).collect::<Option<Vec<_>>>() else {
        return;
    };
    if resolved.is_empty()
        || m.get("type").is_some_and(|t| t != "object")
        || m.get("properties").is_some_and(|p| !p.is_object())
        || m.get("required").is_some_and(|r| !r.is_array())
    {
        return;
    }
    let mut props = match m.get("properties") {
        Some(Value::Object(p)) => p.clone(),
        _ => Map::new(),
    };
    let mut required: Vec<Value> = match m.get("required") {
        Some(Value::Array(r)) => r.clone(),
        _ => Vec::new(),
    };
    for member in &resolved {
        if let Some(Value::Object(p)) = member.get("properties") {
            for (k, schema) in p {
                if props.get(k).is_some_and(|old| old != schema) {
                    // Two members constrain one property differently: keep the allOf.
                    return;
                }
                props.insert(k.clone(), schema.clone());
            }
        }
        if let Some(Value::Array(r)) = member.get("required") {
            for k in r {
                if !required.contains(k) {
                    required.push(k.clone());
                }
            }
        }
    }
    m.remove("allOf");
    m.insert("type".into(), json!("object"));
    m.insert("properties".into(), Value::Object(props));
    m.insert("required".into(), Value::Array(required));
}

// --- 3. lenient fallbacks --------------------------------------------------------------

/// What a bare `$ref` keeps beside it: the definitions it may point into, the
/// resource's identity and the compile options.
const KEPT_BESIDE_REF: [&str; 7] = [
    "$ref",
    "$defs",
    "definitions",
    "$id",
    "id",
    "$schema",
    "x-guidance",
];

/// How far a lenient reading goes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Lenience {
    /// A pattern with look-around or word boundaries keeps the rest of its regex (which
    /// matches more); `false`: it is dropped whole.
    pub loosen_patterns: bool,
    /// The keywords beside every `$ref` dropped (draft 7's reading).
    pub bare_refs: bool,
}

/// `schema` read leniently (module doc) and what that leaves unenforced, for a schema
/// the strict compile refused. `None` when the schema asked to be compiled as it says
/// (`x-guidance.lenient` set) or is not an object.
pub(crate) fn lenient_schema(schema: &Value, how: Lenience) -> Option<(Value, Vec<String>)> {
    let explicit = schema
        .get("x-guidance")
        .and_then(|g| g.get("lenient"))
        .is_some();
    if explicit || !schema.is_object() {
        return None;
    }
    let mut v = compiled_schema(schema.clone());
    let mut notes = Vec::new();
    let ids = resource_ids(&v);
    let mut dropped_patterns = Vec::new();
    let mut loosened = Vec::new();
    let mut external = Vec::new();
    let mut bare = false;
    let mut dialects = Vec::new();
    walk_document(&mut v, &mut |m| {
        if let Some(d) = m.get("$schema").and_then(Value::as_str) {
            if known_draft(d).is_none_or(|k| k != d) {
                dialects.push(d.to_string());
                m.remove("$schema");
            }
        }
        if let Some(p) = m.get("pattern").and_then(Value::as_str) {
            if !runnable_regex(p) {
                let p = p.to_string();
                match without_look_around(&p).filter(|q| how.loosen_patterns && runnable_regex(q)) {
                    Some(q) => {
                        m.insert("pattern".into(), Value::String(q));
                        loosened.push(p);
                    }
                    None => {
                        m.remove("pattern");
                        dropped_patterns.push(p);
                    }
                }
            }
        }
        if let Some(Value::Object(pp)) = m.get("patternProperties") {
            if pp.keys().any(|k| !runnable_regex(k)) {
                let mut kept = Map::new();
                let mut unmatched = None;
                for (k, schema) in pp.clone() {
                    if runnable_regex(&k) {
                        kept.insert(k, schema);
                    } else if let Some(q) =
                        without_look_around(&k).filter(|q| how.loosen_patterns && runnable_regex(q))
                    {
                        loosened.push(k);
                        kept.insert(q, schema);
                    } else {
                        dropped_patterns.push(k);
                        unmatched.get_or_insert(schema);
                    }
                }
                m.insert("patternProperties".into(), Value::Object(kept));
                // Names the dropped regex allowed stay allowed (with its schema) where
                // no other key would be: dropping them could leave a required object
                // with no key it may hold.
                if let Some(schema) = unmatched {
                    if m.get("additionalProperties").is_some_and(|a| a == false) {
                        m.insert("additionalProperties".into(), schema);
                    }
                }
            }
        }
        if let Some(r) = m.get("$ref").and_then(Value::as_str) {
            if !is_local(r, &ids) {
                external.push(r.to_string());
                m.remove("$ref");
            } else if how.bare_refs && m.keys().any(|k| !KEPT_BESIDE_REF.contains(&k.as_str())) {
                m.retain(|k, _| KEPT_BESIDE_REF.contains(&k.as_str()));
                bare = true;
            }
        }
    });
    if let Some(Value::Object(g)) = v.get_mut("x-guidance") {
        g.insert("lenient".into(), Value::Bool(true));
    }
    let listed = |(one, many, why): (&str, &str, &str), mut items: Vec<String>| {
        items.sort();
        items.dedup();
        let n = items.len();
        let mut shown: Vec<String> = items.iter().take(3).map(|s| format!("{s:?}")).collect();
        if n > 3 {
            shown.push(format!("{} more", n - 3));
        }
        format!(
            "{} {}{why}",
            if n == 1 { one } else { many },
            shown.join(", ")
        )
    };
    if !loosened.is_empty() {
        let what = ("look-around in pattern", "look-around in patterns", "");
        notes.push(listed(what, loosened));
    }
    if !dropped_patterns.is_empty() {
        notes.push(listed(("pattern", "patterns", ""), dropped_patterns));
    }
    if !external.is_empty() {
        let what = (
            "$ref to another document",
            "$refs to other documents",
            " (not fetched)",
        );
        notes.push(listed(what, external));
    }
    if !dialects.is_empty() {
        let what = (
            "unknown $schema",
            "unknown $schemas",
            " (read as draft 2020-12)",
        );
        notes.push(listed(what, dialects));
    }
    if bare {
        notes.push(
            "keywords beside a $ref in a reference cycle (read as draft 7 reads them)".into(),
        );
    }
    Some((v, notes))
}

/// `p` without its look-around groups and word boundaries (each an assertion, so the
/// regex left matches every string `p` matches, and more), or `None` when it has none.
fn without_look_around(p: &str) -> Option<String> {
    let c: Vec<char> = p.chars().collect();
    let mut out = String::with_capacity(p.len());
    let (mut i, mut class, mut changed) = (0, false, false);
    while i < c.len() {
        let rest: String = c[i..c.len().min(i + 4)].iter().collect();
        if c[i] == '\\' && i + 1 < c.len() {
            if !class && matches!(c[i + 1], 'b' | 'B') {
                changed = true;
            } else {
                out.push(c[i]);
                out.push(c[i + 1]);
            }
            i += 2;
            continue;
        }
        if class {
            class = c[i] != ']';
        } else if c[i] == '[' {
            class = true;
            // A leading `]` (or `^]`) is a literal of the class.
            if let Some(skip) = ["[^]", "[]"].iter().find(|o| rest.starts_with(**o)) {
                out.push_str(skip);
                i += skip.chars().count();
                continue;
            }
        } else if ["(?=", "(?!", "(?<=", "(?<!"]
            .iter()
            .any(|l| rest.starts_with(l))
        {
            // Skip to the group's closing parenthesis.
            let (mut depth, mut j, mut in_class) = (0usize, i, false);
            while j < c.len() {
                match c[j] {
                    '\\' => j += 1,
                    '[' if !in_class => in_class = true,
                    ']' if in_class => in_class = false,
                    '(' if !in_class => depth += 1,
                    ')' if !in_class => {
                        depth -= 1;
                        if depth == 0 {
                            break;
                        }
                    }
                    _ => {}
                }
                j += 1;
            }
            i = j + 1;
            changed = true;
            continue;
        }
        out.push(c[i]);
        i += 1;
    }
    changed.then_some(out)
}

/// Whether llguidance's regex engine runs `p` as a JSON Schema `pattern` (no
/// look-around, back-reference, word boundary or inner anchor; Rust's regex syntax):
/// asked of the engine itself.
fn runnable_regex(p: &str) -> bool {
    derivre::RegexBuilder::new().mk_regex_for_serach(p).is_ok()
}

/// The `$id`s (and draft 4's `id`s) of the schema's resources, as written, the root's
/// first (`""` when it has none).
fn resource_ids(v: &Value) -> Vec<String> {
    let id_of = |m: &Map<String, Value>| {
        ["$id", "id"]
            .iter()
            .find_map(|k| m.get(*k).and_then(Value::as_str))
            .map(|id| id.trim_end_matches('#').to_string())
    };
    let mut ids = vec![v.as_object().and_then(id_of).unwrap_or_default()];
    let mut v = v.clone();
    walk_schemas(&mut v, &mut |m| ids.extend(id_of(m)));
    ids
}

/// Whether `$ref` `r` points into this document: its own fragment, or, resolved against
/// the root's `$id`, one of its resources' `$id`s.
fn is_local(r: &str, ids: &[String]) -> bool {
    let base = r.split('#').next().unwrap_or("");
    if base.is_empty() {
        return true;
    }
    let root = ids.first().map(String::as_str).unwrap_or("");
    let target = resolved_uri(root, base);
    ids.iter().any(|id| resolved_uri(root, id) == target)
}

/// `rel` resolved against the absolute `base` (RFC 3986's merge and dot-segment
/// removal, enough for schema ids): `rel` itself when it is absolute or `base` is not.
fn resolved_uri(base: &str, rel: &str) -> String {
    let Some(scheme_end) = base.find("://") else {
        return rel.to_string();
    };
    if rel.contains("://") {
        return rel.to_string();
    }
    let after = scheme_end + 3;
    let path_start = base[after..].find('/').map_or(base.len(), |i| after + i);
    let (authority, path) = base.split_at(path_start);
    let merged = if rel.starts_with('/') {
        rel.to_string()
    } else {
        format!("{}{rel}", &path[..path.rfind('/').map_or(0, |i| i + 1)])
    };
    let mut out: Vec<&str> = Vec::new();
    for seg in merged.split('/') {
        match seg {
            "." => {}
            ".." => {
                if out.len() > 1 {
                    out.pop();
                }
            }
            _ => out.push(seg),
        }
    }
    let mut path = out.join("/");
    if !path.starts_with('/') {
        path.insert(0, '/');
    }
    format!("{authority}{path}")
}

/// Call `f` on every schema object of the document `v`: [`walk_schemas`] from the root
/// and from every place a local `$ref` points to (definitions kept under keys of the
/// schema's own choosing, `#/defs/...`), each place once.
fn walk_document(v: &mut Value, f: &mut dyn FnMut(&mut Map<String, Value>)) {
    let mut seen: Vec<String> = Vec::new();
    let mut todo: Vec<String> = vec![String::new()];
    while let Some(at) = todo.pop() {
        if seen.contains(&at) {
            continue;
        }
        seen.push(at.clone());
        let Some(node) = v.pointer_mut(&at) else {
            continue;
        };
        let mut refs = Vec::new();
        walk_schemas(node, &mut |m| {
            f(m);
            if let Some(r) = m.get("$ref").and_then(Value::as_str) {
                refs.push(r.to_string());
            }
        });
        for r in refs {
            if let Some(p) = r.strip_prefix('#').and_then(percent_decoded) {
                if p.starts_with('/') && !seen.contains(&p) && !todo.contains(&p) {
                    todo.push(p);
                }
            }
        }
    }
}

/// Call `f` on every schema object of `v` (the root and every subschema, through every
/// keyword that holds schemas), parents before children.
fn walk_schemas(v: &mut Value, f: &mut dyn FnMut(&mut Map<String, Value>)) {
    let Value::Object(m) = v else {
        return;
    };
    f(m);
    for (k, child) in m.iter_mut() {
        match k.as_str() {
            "properties" | "patternProperties" | "$defs" | "definitions" | "dependentSchemas" => {
                if let Value::Object(map) = child {
                    map.values_mut().for_each(|x| walk_schemas(x, f));
                }
            }
            "dependencies" => {
                if let Value::Object(map) = child {
                    // Draft 7: a schema, or a list of property names (data).
                    map.values_mut()
                        .filter(|x| x.is_object())
                        .for_each(|x| walk_schemas(x, f));
                }
            }
            "anyOf" | "oneOf" | "allOf" | "prefixItems" => {
                if let Value::Array(list) = child {
                    list.iter_mut().for_each(|x| walk_schemas(x, f));
                }
            }
            k if ONE_SCHEMA.contains(&k) => match child {
                Value::Array(list) => list.iter_mut().for_each(|x| walk_schemas(x, f)),
                other => walk_schemas(other, f),
            },
            _ => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dates_follow_the_calendar() {
        let mut v = json!({"properties": {
            "d": {"type": "string", "format": "date"},
            "t": {"format": "date-time"},
            "own": {"type": "string", "format": "date", "pattern": "^2"}
        }});
        repair(&mut v);
        let p = &v["properties"];
        assert_eq!(
            p["own"]["format"], "date",
            "a schema's own pattern is left alone"
        );
        let rx = |k: &str| {
            assert!(p[k].get("format").is_none());
            derivre::Regex::new(p[k]["pattern"].as_str().unwrap()).unwrap()
        };
        let (mut date, mut time) = (rx("d"), rx("t"));
        let days = |y: u32, m: u32| match m {
            2 if y.is_multiple_of(4) && (!y.is_multiple_of(100) || y.is_multiple_of(400)) => 29,
            2 => 28,
            4 | 6 | 9 | 11 => 30,
            _ => 31,
        };
        for y in (0..=2404).chain([9999]) {
            for m in [1, 2, 4, 12] {
                for d in [0, 1, 28, 29, 30, 31, 32] {
                    let valid = y > 0 && d >= 1 && d <= days(y, m);
                    let s = format!("{y:04}-{m:02}-{d:02}");
                    assert_eq!(date.is_match(&s), valid, "{s}");
                    assert_eq!(
                        time.is_match(&format!("{s}T23:59:60.5+01:00")),
                        valid,
                        "{s}"
                    );
                }
            }
        }
        for bad in [
            "2024-13-01",
            "2024-00-10",
            "24-01-01",
            "2024-1-01",
            "2024-01-01 ",
        ] {
            assert!(!date.is_match(bad), "{bad}");
        }
        assert!(time.is_match("2024-02-29t00:00:00Z"));
        for bad in [
            "2024-02-29T24:00:00Z",
            "2024-02-29T10:00:00",
            "2024-02-29T10:00:00+1:00",
        ] {
            assert!(!time.is_match(bad), "{bad}");
        }
    }

    #[test]
    fn schemas_are_read_as_llama_cpp_reads_them() {
        let mut v = json!({
            "type": "object",
            "properties": {
                "n": {"type": "integer", "minimum": 0},
                "x": {"type": "number"},
                "properties": {"type": "object", "properties": {"a": {"enum": [{"type": "integer"}]}}},
                "open": {"type": "object", "properties": {}, "additionalProperties": true},
                "pat": {"type": "object", "properties": {}, "patternProperties": {"^a": {}}},
            },
            "$defs": {"d": {"type": "object", "properties": {"q": {"type": "number", "multipleOf": 0.5}}}},
            "anyOf": [{"type": "integer"}],
            "items": [{"type": "number"}],
        });
        normalize(&mut v);
        assert_eq!(v["additionalProperties"], json!(false));
        let n = &v["properties"]["n"];
        assert_eq!(
            (n["minimum"].clone(), n["maximum"].clone()),
            (json!(0), json!(MAX_DIGITS_INT))
        );
        assert_eq!(v["properties"]["x"]["multipleOf"], json!(NUMBER_STEP));
        // A property named "properties" is a schema like any other; enum values are data.
        assert_eq!(
            v["properties"]["properties"]["additionalProperties"],
            json!(false)
        );
        assert_eq!(
            v["properties"]["properties"]["properties"]["a"]["enum"],
            json!([{"type": "integer"}])
        );
        assert_eq!(v["properties"]["open"]["additionalProperties"], json!(true));
        assert!(v["properties"]["pat"].get("additionalProperties").is_none());
        assert_eq!(v["$defs"]["d"]["additionalProperties"], json!(false));
        assert_eq!(v["$defs"]["d"]["properties"]["q"]["multipleOf"], json!(0.5));
        assert_eq!(v["anyOf"][0]["maximum"], json!(MAX_DIGITS_INT));
        assert_eq!(v["items"][0]["multipleOf"], json!(NUMBER_STEP));
        // An allOf of plain objects is merged (and closed), as llama.cpp merges it.
        let mut all = json!({"allOf": [
            {"type": "object", "properties": {"a": {}}, "required": ["a"]},
            {"properties": {"b": {}}}
        ]});
        normalize(&mut all);
        assert_eq!(
            all,
            json!({"type": "object", "properties": {"a": {}, "b": {}}, "required": ["a"], "additionalProperties": false})
        );
        // Other allOf members combine their properties: none is closed on its own.
        let mut all = json!({"allOf": [{"properties": {"a": {}}, "minProperties": 1}, {"properties": {"b": {}}}]});
        normalize(&mut all);
        assert_eq!(all["allOf"][0]["additionalProperties"], json!(true));
        assert_eq!(all["allOf"][1]["additionalProperties"], json!(true));
        // Numbers: bounded where a bound is missing or beyond 16 digits, also in type lists.
        let mut n = json!({"properties": {
            "a": {"type": ["integer", "null"], "minimum": 1},
            "b": {"type": "number", "minimum": 0},
            "c": {"type": "number", "maximum": 1e300, "exclusiveMinimum": 0.5},
            "d": {"type": "integer", "minimum": 1e20}
        }});
        normalize(&mut n);
        let p = &n["properties"];
        assert_eq!(
            (p["a"]["minimum"].clone(), p["a"]["maximum"].clone()),
            (json!(1), json!(MAX_DIGITS_INT))
        );
        assert_eq!(
            (p["b"]["minimum"].clone(), p["b"]["maximum"].clone()),
            (json!(0), json!(MAX_DIGITS_INT))
        );
        assert_eq!(p["b"]["multipleOf"], json!(NUMBER_STEP));
        assert_eq!(
            (
                p["c"]["exclusiveMinimum"].clone(),
                p["c"]["maximum"].clone()
            ),
            (json!(0.5), json!(MAX_DIGITS_INT))
        );
        // A bound that leaves nothing under the cap is left as written.
        assert_eq!(
            (p["d"]["minimum"].clone(), p["d"].get("maximum")),
            (json!(1e20), None)
        );
        // Keywords of one type make a schema without `type` that type.
        let mut t = json!({"anyOf": [{"properties": {"a": {}}}, {"items": {}}, {"maxLength": 3}, {"description": "x"}, {"enum": [1]}]});
        normalize(&mut t);
        let types: Vec<Value> = t["anyOf"]
            .as_array()
            .unwrap()
            .iter()
            .map(|b| b["type"].clone())
            .collect();
        assert_eq!(
            types,
            vec![
                json!("object"),
                json!("array"),
                json!("string"),
                Value::Null,
                Value::Null
            ]
        );
        // A closed object lists what it requires.
        let mut req = json!({"properties": {"a": {}}, "required": ["a", "version"]});
        normalize(&mut req);
        assert_eq!(req["properties"], json!({"a": {}, "version": {}}));
        // An object without `properties` stays open, as in llama.cpp.
        let mut any = json!({"type": "object"});
        normalize(&mut any);
        assert_eq!(any, json!({"type": "object"}));
    }

    #[test]
    fn ecma_patterns_are_rewritten_to_the_same_language() {
        let cases = [
            // A `{` that starts no quantifier is a literal in ECMA-262.
            (r"^\${{\s*x\s*}}$", r"^\$\{\{\s*x\s*\}\}$"),
            (r"a{,3}", r"a\{,3\}"),
            (r"^a{2,3}b{4}c{1,}$", r"^a{2,3}b{4}c{1,}$"),
            // Escapes whose braces are their own.
            (r"^\p{L}+\u{1F600}\x{41}$", r"^\p{L}+\u{1F600}\x{41}$"),
            // Inside a class `[` and doubled `&&` / `~~` are literals.
            (r"[[]", r"[\[]"),
            (r"[a&&b~~]", r"[a\&\&b\~\~]"),
            (r"[]a]", r"[\]a]"),
            (r"[^]a]", r"[^\]a]"),
            (r"[\]{]x{", r"[\]{]x\{"),
            // NUL and control escapes.
            (r"\0", r"\x00"),
            (r"\01", r"\01"),
            (r"\cJ", r"\x0A"),
            // Already fine: copied.
            (r"^(.*?)\s(a|b)+?$", r"^(.*?)\s(a|b)+?$"),
        ];
        for (ecma, rust) in cases {
            assert_eq!(ecma_regex(ecma), rust, "{ecma}");
            assert_eq!(ecma_regex(rust), rust, "idempotent: {rust}");
            assert!(regex_syntax::Parser::new().parse(&ecma_regex(ecma)).is_ok() || ecma == r"\01");
        }
    }

    #[test]
    fn references_and_dialects_are_repaired() {
        assert_eq!(
            uri_escaped("#/definitions/Record<string,any>"),
            "#/definitions/Record%3Cstring,any%3E"
        );
        assert_eq!(uri_escaped("#/a%20b/c d"), "#/a%20b/c%20d");
        assert_eq!(uri_escaped("x.json#/a#b"), "x.json#/a%23b");
        assert_eq!(uri_escaped("#/definitions/é"), "#/definitions/%C3%A9");
        let mut v = json!({
            "$schema": "https://json-schema.org/draft-07/schema#",
            "definitions": {"Record<a>": {"type": "string", "pattern": "^{x}$"}},
            "properties": {"r": {"$ref": "#/definitions/Record<a>"}}
        });
        repair(&mut v);
        assert_eq!(v["$schema"], "http://json-schema.org/draft-07/schema#");
        assert_eq!(v["properties"]["r"]["$ref"], "#/definitions/Record%3Ca%3E");
        let mut anchor = json!({"$ref": "#definitions/a", "definitions": {"a": {}}});
        repair(&mut anchor);
        assert_eq!(anchor["$ref"], "#/definitions/a");
        assert_eq!(v["definitions"]["Record<a>"]["pattern"], r"^\{x\}$");
        assert_eq!(
            local_target(&v, "#/definitions/Record%3Ca%3E"),
            Some(&v["definitions"]["Record<a>"])
        );
        let mut f = json!({"properties": {
            "a": {"type": "integer", "format": "int32"},
            "b": {"type": "integer", "format": "uint64", "maximum": 10},
            "c": {"type": "string", "format": "uuid4"},
            "d": {"type": "number", "format": "double"},
            "e": {"type": "string", "format": "email"}
        }});
        repair(&mut f);
        let p = &f["properties"];
        assert_eq!(
            (p["a"]["minimum"].clone(), p["a"]["maximum"].clone()),
            (json!(-2147483648i64), json!(2147483647))
        );
        assert_eq!(
            (p["b"]["minimum"].clone(), p["b"]["maximum"].clone()),
            (json!(0), json!(10))
        );
        let uuid = p["c"]["pattern"].as_str().unwrap();
        assert!(
            uuid.contains("-4[0-9a-fA-F]{3}-") && p["c"].get("format").is_none(),
            "{uuid}"
        );
        assert_eq!(p["d"], json!({"type": "number"}));
        assert_eq!(p["e"]["format"], "email");
        for (uri, known) in [
            (
                "http://json-schema.org/draft-04/schema",
                Some("http://json-schema.org/draft-04/schema#"),
            ),
            (
                "http://json-schema.org/draft/2019-09/schema#",
                Some("https://json-schema.org/draft/2019-09/schema"),
            ),
            (
                "http://json-schema.org/schema#",
                Some("https://json-schema.org/draft/2020-12/schema"),
            ),
            ("https://json.schemastore.org/schema-catalog.json", None),
        ] {
            assert_eq!(known_draft(uri), known, "{uri}");
        }
    }

    #[test]
    fn branches_refining_an_object_take_its_keys() {
        // drone.json's shape: an object listing `kind`, one of several whole objects.
        let mut v = json!({
            "type": "object",
            "required": ["kind"],
            "properties": {"kind": {"enum": ["a", "b"]}},
            "oneOf": [{"$ref": "#/definitions/a"}, {"required": ["x"]}, {"type": "string"}],
            "definitions": {"a": {"type": "object", "properties": {"kind": {"const": "a"}, "name": {}}, "required": ["name"]}}
        });
        normalize(&mut v);
        assert_eq!(v["additionalProperties"], json!(true));
        let a = &v["oneOf"][0];
        assert_eq!(a["additionalProperties"], json!(false));
        assert_eq!(a["properties"]["kind"], json!({"const": "a"}));
        assert_eq!(a["properties"]["name"], json!({}));
        assert_eq!(a["required"], json!(["name"]));
        assert_eq!(v["oneOf"][1]["properties"], json!({"kind": {}, "x": {}}));
        assert_eq!(v["oneOf"][1]["additionalProperties"], json!(false));
        assert_eq!(v["oneOf"][2], json!({"type": "string"}));
        // The definition itself stays closed where it stands alone.
        assert_eq!(v["definitions"]["a"]["additionalProperties"], json!(false));

        // dependabot.json's shape: "at least one of" branches listing one property each.
        let mut v = json!({
            "type": "object",
            "properties": {"a": {"type": "string"}, "b": {"type": "string"}, "c": {}},
            "anyOf": [{"properties": {"a": {}}, "required": ["a"]}, {"properties": {"b": {}}, "required": ["b"]}]
        });
        normalize(&mut v);
        assert_eq!(v["additionalProperties"], json!(true));
        for b in v["anyOf"].as_array().unwrap() {
            let keys: Vec<&String> = b["properties"].as_object().unwrap().keys().collect();
            assert_eq!(keys.len(), 3, "{b}");
            assert_eq!(b["additionalProperties"], json!(false));
        }
        // Branches that only add `required` leave the object closed as it was.
        let mut v = json!({"properties": {"a": {}, "b": {}}, "oneOf": [{"required": ["a"]}, {"required": ["b"]}]});
        normalize(&mut v);
        assert_eq!(v["additionalProperties"], json!(true));
        assert_eq!(v["oneOf"][0]["additionalProperties"], json!(false));
    }

    #[test]
    fn references_combined_with_other_schemas_are_copied_open() {
        // bitbucket-pipelines.json: an allOf of a plain definition and an object.
        let mut v = json!({
            "allOf": [{"$ref": "#/definitions/base"}, {"properties": {"aws": {}}, "required": ["aws"], "type": "object"}],
            "definitions": {"base": {"type": "object", "properties": {"name": {}}, "required": ["name"], "title": "Base"}}
        });
        normalize(&mut v);
        assert!(v.get("allOf").is_none(), "{v}");
        assert_eq!(v["required"], json!(["name", "aws"]));
        assert_eq!(v["additionalProperties"], json!(false));
        // A member that is not plain is copied in place, open; the definition stays closed.
        let mut v = json!({
            "allOf": [{"$ref": "#/definitions/base"}, {"oneOf": [{"$ref": "#/definitions/docker"}]}],
            "definitions": {
                "base": {"type": "object", "properties": {"kind": {}}, "minProperties": 1},
                "docker": {"type": "object", "properties": {"image": {}}, "required": ["image"]}
            }
        });
        normalize(&mut v);
        assert_eq!(v["allOf"][0]["properties"], json!({"kind": {}}));
        assert_eq!(v["allOf"][0]["additionalProperties"], json!(true));
        assert_eq!(
            v["allOf"][1]["oneOf"][0]["additionalProperties"],
            json!(true)
        );
        assert_eq!(
            v["definitions"]["docker"]["additionalProperties"],
            json!(false)
        );
        // A cycle of combined references stops after a bounded number of copies.
        let mut v = json!({"allOf": [{"$ref": "#"}], "properties": {"a": {}}, "minProperties": 1});
        normalize(&mut v);
        assert!(v.to_string().len() < 1 << 20);
    }

    const LOOSE: Lenience = Lenience {
        loosen_patterns: true,
        bare_refs: false,
    };

    #[test]
    fn lenient_readings_name_what_they_drop() {
        let schema = json!({
            "$id": "https://example.com/schemas/app.json",
            "$schema": "https://example.com/my-dialect",
            "type": "object",
            "properties": {
                "k": {"$ref": "https://json.schemastore.org/other.json#/definitions/k"},
                "rel": {"$ref": "defs/other.json"},
                "me": {"$ref": "app.json#/definitions/n"},
                "up": {"$ref": "../schemas/app.json"},
                "w": {"type": "string", "pattern": "^(a)\\1$"},
                "ok": {"type": "string", "pattern": "^[a-z]+$"}
            },
            "patternProperties": {"^(b)\\1": {}},
            "definitions": {"n": {"type": "integer"}}
        });
        let (v, notes) = lenient_schema(&schema, LOOSE).unwrap();
        let p = &v["properties"];
        assert!(p["k"].get("$ref").is_none() && p["rel"].get("$ref").is_none());
        assert_eq!(p["me"]["$ref"], "app.json#/definitions/n");
        assert_eq!(p["up"]["$ref"], "../schemas/app.json");
        assert!(p["w"].get("pattern").is_none());
        assert_eq!(p["ok"]["pattern"], "^[a-z]+$");
        assert!(v["patternProperties"].as_object().unwrap().is_empty());
        assert!(v.get("$schema").is_none());
        assert_eq!(v["x-guidance"]["lenient"], json!(true));
        let notes = notes.join("; ");
        for what in [
            "patterns \"",
            "$refs to other documents",
            "(not fetched)",
            "unknown $schema \"https://example.com/my-dialect\"",
        ] {
            assert!(notes.contains(what), "{notes}");
        }
        // Keywords beside a `$ref` go only at the second stage.
        let cyc = json!({"definitions": {"t": {"$ref": "#/definitions/t", "minLength": 1}}, "$ref": "#/definitions/t"});
        let (v, _) = lenient_schema(&cyc, LOOSE).unwrap();
        assert_eq!(v["definitions"]["t"]["minLength"], json!(1));
        let (v, notes) = lenient_schema(
            &cyc,
            Lenience {
                loosen_patterns: true,
                bare_refs: true,
            },
        )
        .unwrap();
        assert_eq!(v["definitions"]["t"], json!({"$ref": "#/definitions/t"}));
        assert!(v.get("definitions").is_some() && v.get("x-guidance").is_some());
        assert!(notes.iter().any(|n| n.contains("beside a $ref")));
        // A schema that asked to be strict is not read leniently.
        assert!(lenient_schema(&json!({"x-guidance": {"lenient": false}}), LOOSE).is_none());
    }

    #[test]
    fn look_around_is_loosened_or_dropped() {
        assert_eq!(
            without_look_around(r"^(?!plugins$)[a-z0-9][a-z0-9+-]*$").as_deref(),
            Some(r"^[a-z0-9][a-z0-9+-]*$")
        );
        assert_eq!(
            without_look_around(r"^a(?=(b|c)\))x(?<!\(y)$").as_deref(),
            Some(r"^ax$")
        );
        assert_eq!(
            without_look_around(r"\bword\b[\b]").as_deref(),
            Some(r"word[\b]")
        );
        assert_eq!(without_look_around(r"[(?!]x").as_deref(), None);
        assert_eq!(without_look_around(r"^plain$"), None);
        let schema = json!({
            "type": "object",
            "properties": {
                "name": {"type": "string", "pattern": "^(?!plugins$)[a-z]+$"},
                "parts": {"type": "object", "minProperties": 1, "additionalProperties": false,
                          "patternProperties": {"^(?!x)[a-z]+$": {"type": "integer"}, "^(a)\\1$": {"type": "string"}}}
            }
        });
        let (v, notes) = lenient_schema(&schema, LOOSE).unwrap();
        assert_eq!(v["properties"]["name"]["pattern"], "^[a-z]+$");
        let parts = &v["properties"]["parts"];
        assert_eq!(parts["patternProperties"]["^[a-z]+$"]["type"], "integer");
        // The back-reference is dropped; the names it allowed stay allowed.
        assert_eq!(parts["additionalProperties"]["type"], "string");
        assert!(
            notes
                .iter()
                .any(|n| n.starts_with("look-around in patterns")),
            "{notes:?}"
        );
        let strict = Lenience {
            loosen_patterns: false,
            bare_refs: false,
        };
        let (v, _) = lenient_schema(&schema, strict).unwrap();
        assert!(v["properties"]["name"].get("pattern").is_none());
    }

    #[test]
    fn relative_ids_resolve_like_uris() {
        let base = "https://a.org/x/y/schema.json";
        assert_eq!(
            resolved_uri(base, "other.json"),
            "https://a.org/x/y/other.json"
        );
        assert_eq!(resolved_uri(base, "../z.json"), "https://a.org/x/z.json");
        assert_eq!(resolved_uri(base, "/top.json"), "https://a.org/top.json");
        assert_eq!(resolved_uri(base, "http://b.org/q"), "http://b.org/q");
        assert_eq!(
            resolved_uri("ng-cli://config/schema.json", "../../a/schema.json"),
            "ng-cli://config/a/schema.json"
        );
        assert_eq!(resolved_uri("", "rel.json"), "rel.json");
        let ids = vec![base.to_string()];
        assert!(is_local("schema.json#/definitions/a", &ids));
        assert!(is_local("#/definitions/a", &ids));
        assert!(!is_local("../schema.json", &ids));
    }
}
