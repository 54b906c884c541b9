//! A located YAML tree and a serde deserializer over it that keeps going after an error.
//!
//! serde-saphyr streams events into the target type and stops at the first error, and it has no
//! generic value type. To report *every* structural error (an unknown key in one target and a
//! wrong type in another, or two typos in the same target), the document is first read into a
//! [`Node`] tree in which every node, keys included, carries its source position. The raw schema
//! structs are then deserialized from the tree by [`NodeDe`], one section at a time, with
//! [`collect`]: when deserialization fails, the mapping entry that caused the error is excluded
//! and the section is deserialized again, until it succeeds or the error cannot be pinned on an
//! entry. Deserializing from an in-memory tree is cheap, so the retries cost little.
//!
//! Scalars keep their source text, so a plain `5` or `yes` can still be read as a string, the way
//! YAML schema-less parsing reads it when the target type asks for a string.
//!
//! The module also owns reading a document into the tree ([`yaml_options`], [`syntax_error`])
//! and the two lookups every section's parser uses on it ([`value_of`], [`each`]), so that no
//! section reaches into the tree's shape by itself.

use std::collections::HashSet;
use std::fmt;
use std::marker::PhantomData;

use serde::Deserialize;
use serde::de::{self, DeserializeOwned, IntoDeserializer, Visitor};

use super::diagnostics::{did_you_mean, quote};

pub use super::diagnostics::Pos;

impl Pos {
    fn of(location: serde_saphyr::Location) -> Self {
        Self {
            line: location.line(),
            column: location.column(),
        }
    }
}

/// Errors of one file: position and message.
pub type Diags = Vec<(Pos, String)>;

/// One node of the document tree with its position.
#[derive(Debug)]
pub struct Node {
    /// Where the node is used (for an alias: the alias, not the anchor).
    pub pos: Pos,
    /// Byte range of the node's text where it is defined, when known (scalars only).
    raw: Option<(usize, usize)>,
    /// The node's value.
    pub kind: Kind,
}

/// The value of a [`Node`].
#[derive(Debug)]
pub enum Kind {
    /// `null`, `~` or nothing.
    Null,
    /// `true` or `false`.
    Bool(bool),
    /// An integer, wide enough for every YAML integer a config could hold.
    Int(i128),
    /// A float.
    Float(f64),
    /// A string, quoted or plain.
    Str(String),
    /// A sequence, block or flow.
    Seq(Vec<Node>),
    /// A mapping, its entries in document order (keys are nodes, so each keeps its position).
    Map(Vec<(Node, Node)>),
}

impl Kind {
    fn unexpected(&self) -> de::Unexpected<'_> {
        use de::Unexpected as U;
        match self {
            Kind::Null => U::Unit,
            Kind::Bool(b) => U::Bool(*b),
            Kind::Int(i) => match i64::try_from(*i) {
                Ok(n) => U::Signed(n),
                Err(_) => U::Other("a large integer"),
            },
            Kind::Float(x) => U::Float(*x),
            Kind::Str(s) => U::Str(s),
            Kind::Seq(_) => U::Seq,
            Kind::Map(_) => U::Map,
        }
    }
}

impl Node {
    /// The entries of a mapping node, empty for other nodes.
    pub fn entries(&self) -> &[(Node, Node)] {
        match &self.kind {
            Kind::Map(entries) => entries,
            _ => &[],
        }
    }

    /// The text of a scalar node as written, for reading it as a string or a key.
    pub fn text<'a>(&'a self, src: &'a str) -> Option<&'a str> {
        match &self.kind {
            Kind::Str(s) => Some(s),
            Kind::Bool(_) | Kind::Int(_) | Kind::Float(_) | Kind::Null => {
                let (start, len) = self.raw?;
                src.get(start..start.checked_add(len)?)
            }
            Kind::Seq(_) | Kind::Map(_) => None,
        }
    }

    /// A stable identity for exclusion sets: the node's address in the (immutable) tree.
    fn id(&self) -> usize {
        std::ptr::from_ref(self) as usize
    }
}

impl<'de> Deserialize<'de> for Node {
    fn deserialize<D: de::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let spanned = serde_saphyr::Spanned::<Kind>::deserialize(deserializer)?;
        let span = spanned.defined.span();
        let raw = span
            .byte_offset()
            .zip(span.byte_len())
            .and_then(|(o, l)| Some((usize::try_from(o).ok()?, usize::try_from(l).ok()?)));
        Ok(Node {
            pos: Pos::of(spanned.referenced),
            raw,
            kind: spanned.value,
        })
    }
}

impl<'de> Deserialize<'de> for Kind {
    fn deserialize<D: de::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_any(KindVisitor)
    }
}

struct KindVisitor;

impl<'de> Visitor<'de> for KindVisitor {
    type Value = Kind;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("any YAML value")
    }
    fn visit_unit<E>(self) -> Result<Kind, E> {
        Ok(Kind::Null)
    }
    fn visit_none<E>(self) -> Result<Kind, E> {
        Ok(Kind::Null)
    }
    fn visit_some<D: de::Deserializer<'de>>(self, d: D) -> Result<Kind, D::Error> {
        Kind::deserialize(d)
    }
    fn visit_newtype_struct<D: de::Deserializer<'de>>(self, d: D) -> Result<Kind, D::Error> {
        Kind::deserialize(d)
    }
    fn visit_bool<E>(self, v: bool) -> Result<Kind, E> {
        Ok(Kind::Bool(v))
    }
    fn visit_i64<E>(self, v: i64) -> Result<Kind, E> {
        Ok(Kind::Int(v.into()))
    }
    fn visit_u64<E>(self, v: u64) -> Result<Kind, E> {
        Ok(Kind::Int(v.into()))
    }
    fn visit_i128<E>(self, v: i128) -> Result<Kind, E> {
        Ok(Kind::Int(v))
    }
    fn visit_u128<E: de::Error>(self, v: u128) -> Result<Kind, E> {
        i128::try_from(v)
            .map(Kind::Int)
            .map_err(|_| E::custom("integer is too large"))
    }
    fn visit_f64<E>(self, v: f64) -> Result<Kind, E> {
        Ok(Kind::Float(v))
    }
    fn visit_char<E>(self, v: char) -> Result<Kind, E> {
        Ok(Kind::Str(v.into()))
    }
    fn visit_str<E>(self, v: &str) -> Result<Kind, E> {
        Ok(Kind::Str(v.into()))
    }
    fn visit_string<E>(self, v: String) -> Result<Kind, E> {
        Ok(Kind::Str(v))
    }
    fn visit_bytes<E>(self, v: &[u8]) -> Result<Kind, E> {
        Ok(Kind::Str(String::from_utf8_lossy(v).into_owned()))
    }
    fn visit_seq<A: de::SeqAccess<'de>>(self, mut seq: A) -> Result<Kind, A::Error> {
        let mut items = Vec::new();
        while let Some(item) = seq.next_element()? {
            items.push(item);
        }
        Ok(Kind::Seq(items))
    }
    fn visit_map<A: de::MapAccess<'de>>(self, mut map: A) -> Result<Kind, A::Error> {
        let mut entries = Vec::new();
        while let Some(entry) = map.next_entry()? {
            entries.push(entry);
        }
        Ok(Kind::Map(entries))
    }
}

/// A value with the position of its node and of the key it was found under.
///
/// Only the tree's deserializer can produce one: it answers the private newtype marker with the positions.
#[derive(Debug)]
pub struct Sp<T> {
    /// The value.
    pub value: T,
    /// The value's position: where value errors point.
    pub pos: Pos,
    /// The key's position (the value's when there is no key): where errors about the field point.
    pub key: Pos,
}

const SPAN_MARKER: &str = "$__probe_engine_config_span";

impl<'de, T: Deserialize<'de>> Deserialize<'de> for Sp<T> {
    fn deserialize<D: de::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_newtype_struct(SPAN_MARKER, SpVisitor(PhantomData))
    }
}

struct SpVisitor<T>(PhantomData<T>);

impl<'de, T: Deserialize<'de>> Visitor<'de> for SpVisitor<T> {
    type Value = Sp<T>;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a located value")
    }

    fn visit_seq<A: de::SeqAccess<'de>>(self, mut seq: A) -> Result<Sp<T>, A::Error> {
        let mut next = |i| {
            seq.next_element::<u64>()?
                .ok_or_else(|| de::Error::invalid_length(i, &self))
        };
        let pos = Pos {
            line: next(0)?,
            column: next(1)?,
        };
        let key = Pos {
            line: next(2)?,
            column: next(3)?,
        };
        let value = seq
            .next_element::<T>()?
            .ok_or_else(|| de::Error::invalid_length(4, &self))?;
        Ok(Sp { value, pos, key })
    }
}

const BOOL_OR_MARKER: &str = "$__probe_engine_config_bool_or";
const ONE_OR_MANY_MARKER: &str = "$__probe_engine_config_one_or_many";

/// Either a boolean or a `T`, for keys such as `flap: false` / `flap: {window: 5m}`.
///
/// serde's untagged enums would lose the positions (they buffer the value first), so [`NodeDe`]
/// answers a private newtype marker: a boolean node is visited as a boolean, anything else is
/// deserialized as `T` with the usual context and positions.
#[derive(Debug)]
pub enum BoolOr<T> {
    Bool(bool),
    Value(T),
}

impl<'de, T: Deserialize<'de>> Deserialize<'de> for BoolOr<T> {
    fn deserialize<D: de::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct V<T>(PhantomData<T>);
        impl<'de, T: Deserialize<'de>> Visitor<'de> for V<T> {
            type Value = BoolOr<T>;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a boolean or a mapping")
            }
            fn visit_bool<E>(self, v: bool) -> Result<BoolOr<T>, E> {
                Ok(BoolOr::Bool(v))
            }
            fn visit_newtype_struct<D: de::Deserializer<'de>>(
                self,
                d: D,
            ) -> Result<BoolOr<T>, D::Error> {
                T::deserialize(d).map(BoolOr::Value)
            }
        }
        deserializer.deserialize_newtype_struct(BOOL_OR_MARKER, V(PhantomData))
    }
}

/// A sequence, or a single value read as a sequence of one: `status: 200` or `status: [200, 204]`.
/// Like `BoolOr`, answered by the tree's deserializer through a private marker so positions are kept.
#[derive(Debug)]
pub struct OneOrMany<T>(pub Vec<T>);

impl<'de, T: Deserialize<'de>> Deserialize<'de> for OneOrMany<T> {
    fn deserialize<D: de::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct V<T>(PhantomData<T>);
        impl<'de, T: Deserialize<'de>> Visitor<'de> for V<T> {
            type Value = OneOrMany<T>;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a value or a sequence")
            }
            fn visit_seq<A: de::SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
                let mut items = Vec::new();
                while let Some(item) = seq.next_element()? {
                    items.push(item);
                }
                Ok(OneOrMany(items))
            }
            fn visit_newtype_struct<D: de::Deserializer<'de>>(
                self,
                d: D,
            ) -> Result<Self::Value, D::Error> {
                Vec::<T>::deserialize(d).map(OneOrMany)
            }
        }
        deserializer.deserialize_newtype_struct(ONE_OR_MANY_MARKER, V(PhantomData))
    }
}

/// The entries of a mapping whose keys are data (header names, JSON paths), in document order.
/// Each value is located, and [`Sp::key`] is where its key is, for errors about the key.
#[derive(Debug)]
pub struct Entries<V>(pub Vec<(String, Sp<V>)>);

impl<'de, V: Deserialize<'de>> Deserialize<'de> for Entries<V> {
    fn deserialize<D: de::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct Vis<V>(PhantomData<V>);
        impl<'de, V: Deserialize<'de>> Visitor<'de> for Vis<V> {
            type Value = Entries<V>;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a mapping")
            }
            fn visit_map<A: de::MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
                let mut entries = Vec::new();
                while let Some(key) = map.next_key::<String>()? {
                    entries.push((key, map.next_value()?));
                }
                Ok(Entries(entries))
            }
        }
        deserializer.deserialize_map(Vis(PhantomData))
    }
}

/// Feeds a single node as a one-element sequence, for [`OneOrMany`].
struct OneSeq<'a> {
    de: Option<NodeDe<'a>>,
}

impl<'de> de::SeqAccess<'de> for OneSeq<'_> {
    type Error = DeErr;

    fn next_element_seed<T: de::DeserializeSeed<'de>>(
        &mut self,
        seed: T,
    ) -> Result<Option<T::Value>, DeErr> {
        self.de.take().map(|de| seed.deserialize(de)).transpose()
    }
}

/// A structural error found while deserializing from the tree. Boxed: it travels through every
/// level of the deserializer as the `Err` of a `Result`.
#[derive(Debug)]
pub struct DeErr(Box<ErrData>);

impl std::ops::Deref for DeErr {
    type Target = ErrData;
    fn deref(&self) -> &ErrData {
        &self.0
    }
}

impl std::ops::DerefMut for DeErr {
    fn deref_mut(&mut self) -> &mut ErrData {
        &mut self.0
    }
}

#[derive(Debug)]
pub struct ErrData {
    kind: ErrKind,
    /// Where the error points; set by the innermost node that saw it.
    pos: Option<Pos>,
    /// The keys leading to the failing value, innermost first.
    path: Vec<String>,
    /// The innermost struct being deserialized (`target`, `tcp`, ...).
    context: Option<&'static str>,
    /// The mapping entry (key node id) to exclude before retrying.
    entry: Option<usize>,
    /// A consequence of an earlier exclusion (a required key that was excluded): not reported.
    consequential: bool,
}

#[derive(Debug)]
enum ErrKind {
    Custom(String),
    InvalidType {
        found: String,
        expected: String,
    },
    InvalidValue {
        found: String,
        expected: String,
    },
    UnknownField {
        field: String,
        expected: &'static [&'static str],
    },
    MissingField(&'static str),
    DuplicateField(String),
}

impl DeErr {
    fn new(kind: ErrKind) -> Self {
        Self(Box::new(ErrData {
            kind,
            pos: None,
            path: Vec::new(),
            context: None,
            entry: None,
            consequential: false,
        }))
    }

    fn at(mut self, pos: Pos) -> Self {
        self.pos.get_or_insert(pos);
        self
    }

    fn blame(mut self, entry: usize) -> Self {
        self.entry.get_or_insert(entry);
        self
    }

    /// Where the error points, or `fallback` if no node claimed it.
    pub fn pos_or(&self, fallback: Pos) -> Pos {
        self.pos.unwrap_or(fallback)
    }

    fn field(&self) -> Option<String> {
        (!self.path.is_empty()).then(|| {
            let mut keys: Vec<&str> = self.path.iter().map(String::as_str).collect();
            keys.reverse();
            keys.join(".")
        })
    }
}

impl fmt::Display for DeErr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let context = self.context.unwrap_or("mapping");
        let subject = match self.field() {
            Some(field) => format!("{field:?}"),
            None => context.to_owned(),
        };
        match &self.kind {
            ErrKind::Custom(msg) => match self.field() {
                Some(field) => write!(f, "invalid value for {field:?}: {msg}"),
                None => f.write_str(msg),
            },
            ErrKind::InvalidType { found, expected } => {
                write!(
                    f,
                    "invalid type for {subject}: expected {expected}, found {found}"
                )
            }
            ErrKind::InvalidValue { found, expected } => {
                write!(
                    f,
                    "invalid value for {subject}: expected {expected}, found {found}"
                )
            }
            ErrKind::UnknownField { field, expected } => {
                write!(f, "unknown field {field:?} in {context}")?;
                match did_you_mean(field, expected.iter().copied()) {
                    Some(best) => write!(f, ", did you mean {best:?}?"),
                    None => {
                        let list: Vec<String> = expected.iter().map(|k| format!("{k:?}")).collect();
                        write!(f, "; expected one of {}", list.join(", "))
                    }
                }
            }
            ErrKind::MissingField(field) => write!(f, "missing field {field:?} in {context}"),
            ErrKind::DuplicateField(field) => write!(f, "duplicate field {field:?} in {context}"),
        }
    }
}

impl std::error::Error for DeErr {}

fn describe_unexpected(unexpected: de::Unexpected<'_>) -> String {
    use de::Unexpected as U;
    match unexpected {
        U::Bool(b) => format!("boolean {b}"),
        U::Unsigned(n) => format!("integer {n}"),
        U::Signed(n) => format!("integer {n}"),
        U::Float(n) => format!("number {n}"),
        U::Char(c) => format!("string {:?}", c.to_string()),
        U::Str(s) => format!("string {}", quote(s)),
        U::Unit | U::Option => "null".to_owned(),
        U::Seq => "a sequence".to_owned(),
        U::Map => "a mapping".to_owned(),
        other => other.to_string(),
    }
}

fn describe_expected(expected: &dyn de::Expected) -> String {
    let text = expected.to_string();
    match text.as_str() {
        "u32" => "an integer between 0 and 4294967295".to_owned(),
        "f64" => "a number".to_owned(),
        "field identifier" => "a string key".to_owned(),
        t if t.starts_with("struct ") => "a mapping".to_owned(),
        _ => text,
    }
}

impl de::Error for DeErr {
    fn custom<T: fmt::Display>(msg: T) -> Self {
        Self::new(ErrKind::Custom(msg.to_string()))
    }
    fn invalid_type(unexp: de::Unexpected<'_>, exp: &dyn de::Expected) -> Self {
        Self::new(ErrKind::InvalidType {
            found: describe_unexpected(unexp),
            expected: describe_expected(exp),
        })
    }
    fn invalid_value(unexp: de::Unexpected<'_>, exp: &dyn de::Expected) -> Self {
        Self::new(ErrKind::InvalidValue {
            found: describe_unexpected(unexp),
            expected: describe_expected(exp),
        })
    }
    fn unknown_field(field: &str, expected: &'static [&'static str]) -> Self {
        Self::new(ErrKind::UnknownField {
            field: field.to_owned(),
            expected,
        })
    }
    fn missing_field(field: &'static str) -> Self {
        Self::new(ErrKind::MissingField(field))
    }
    fn duplicate_field(field: &'static str) -> Self {
        Self::new(ErrKind::DuplicateField(field.to_owned()))
    }
}

/// What every [`NodeDe`] of one attempt shares.
struct Cx<'a> {
    src: &'a str,
    excluded: &'a HashSet<usize>,
}

/// A serde deserializer over one [`Node`].
#[derive(Clone, Copy)]
struct NodeDe<'a> {
    node: &'a Node,
    /// The key this node is the value of, if any.
    key: Option<&'a Node>,
    cx: &'a Cx<'a>,
}

impl<'a> NodeDe<'a> {
    fn child(&self, node: &'a Node, key: Option<&'a Node>) -> Self {
        Self {
            node,
            key,
            cx: self.cx,
        }
    }

    fn fail<T>(&self, r: Result<T, DeErr>) -> Result<T, DeErr> {
        r.map_err(|e| e.at(self.node.pos))
    }

    /// Whether a key named `name` of this mapping, or a misspelling of it, was excluded by an
    /// earlier attempt (and reported then).
    fn excluded_key(&self, name: &str) -> bool {
        self.node.entries().iter().any(|(k, _)| {
            self.cx.excluded.contains(&k.id())
                && k.text(self.cx.src)
                    .is_some_and(|text| text == name || did_you_mean(text, [name]).is_some())
        })
    }
}

impl<'de> de::Deserializer<'de> for NodeDe<'_> {
    type Error = DeErr;

    fn deserialize_any<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, DeErr> {
        let r = match &self.node.kind {
            Kind::Null => visitor.visit_unit(),
            Kind::Bool(b) => visitor.visit_bool(*b),
            Kind::Int(i) => {
                if let Ok(n) = i64::try_from(*i) {
                    visitor.visit_i64(n)
                } else if let Ok(n) = u64::try_from(*i) {
                    visitor.visit_u64(n)
                } else {
                    visitor.visit_i128(*i)
                }
            }
            Kind::Float(x) => visitor.visit_f64(*x),
            Kind::Str(s) => visitor.visit_str(s),
            Kind::Seq(items) => visitor.visit_seq(SeqDe {
                items: items.iter(),
                de: self,
            }),
            Kind::Map(entries) => visitor.visit_map(MapDe {
                entries: entries.iter(),
                current: None,
                seen: HashSet::new(),
                de: self,
            }),
        };
        self.fail(r)
    }

    fn deserialize_option<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, DeErr> {
        let r = match self.node.kind {
            Kind::Null => visitor.visit_none(),
            _ => visitor.visit_some(self),
        };
        self.fail(r)
    }

    fn deserialize_str<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, DeErr> {
        match (&self.node.kind, self.node.text(self.cx.src)) {
            (Kind::Bool(_) | Kind::Int(_) | Kind::Float(_), Some(text)) => {
                let r = visitor.visit_str(text);
                self.fail(r)
            }
            _ => self.deserialize_any(visitor),
        }
    }

    fn deserialize_string<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, DeErr> {
        self.deserialize_str(visitor)
    }

    fn deserialize_identifier<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, DeErr> {
        self.deserialize_str(visitor)
    }

    fn deserialize_ignored_any<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, DeErr> {
        visitor.visit_unit()
    }

    fn deserialize_newtype_struct<V: Visitor<'de>>(
        self,
        name: &'static str,
        visitor: V,
    ) -> Result<V::Value, DeErr> {
        let r = match (name, &self.node.kind) {
            (SPAN_MARKER, _) => visitor.visit_seq(SpanSeq { de: self, index: 0 }),
            (BOOL_OR_MARKER, Kind::Bool(b)) => visitor.visit_bool(*b),
            (ONE_OR_MANY_MARKER, kind) if !matches!(kind, Kind::Seq(_)) => {
                visitor.visit_seq(OneSeq { de: Some(self) })
            }
            _ => visitor.visit_newtype_struct(self),
        };
        self.fail(r)
    }

    fn deserialize_struct<V: Visitor<'de>>(
        self,
        name: &'static str,
        _fields: &'static [&'static str],
        visitor: V,
    ) -> Result<V::Value, DeErr> {
        // Derived structs also accept sequences (fields by position): a config never means that.
        let r = match &self.node.kind {
            Kind::Map(_) => self.deserialize_any(visitor),
            other => Err(de::Error::invalid_type(other.unexpected(), &"a mapping")),
        };
        self.fail(r).map_err(|mut e| {
            e.context.get_or_insert(name);
            if let ErrKind::MissingField(field) = e.kind
                && self.excluded_key(field)
            {
                e.consequential = true;
            }
            e
        })
    }

    serde::forward_to_deserialize_any! {
        bool i8 i16 i32 i64 i128 u8 u16 u32 u64 u128 f32 f64 char bytes byte_buf unit
        unit_struct seq tuple tuple_struct map enum
    }
}

struct SeqDe<'a> {
    items: std::slice::Iter<'a, Node>,
    de: NodeDe<'a>,
}

impl<'de> de::SeqAccess<'de> for SeqDe<'_> {
    type Error = DeErr;

    fn next_element_seed<T: de::DeserializeSeed<'de>>(
        &mut self,
        seed: T,
    ) -> Result<Option<T::Value>, DeErr> {
        match self.items.next() {
            Some(item) => seed.deserialize(self.de.child(item, None)).map(Some),
            None => Ok(None),
        }
    }
}

struct MapDe<'a> {
    entries: std::slice::Iter<'a, (Node, Node)>,
    current: Option<&'a (Node, Node)>,
    seen: HashSet<&'a str>,
    de: NodeDe<'a>,
}

impl<'de> de::MapAccess<'de> for MapDe<'_> {
    type Error = DeErr;

    fn next_key_seed<K: de::DeserializeSeed<'de>>(
        &mut self,
        seed: K,
    ) -> Result<Option<K::Value>, DeErr> {
        let entry = loop {
            match self.entries.next() {
                None => return Ok(None),
                Some(entry) if self.de.cx.excluded.contains(&entry.0.id()) => continue,
                Some(entry) => break entry,
            }
        };
        self.current = Some(entry);
        let (key, _) = entry;
        if let Some(text) = key.text(self.de.cx.src)
            && !self.seen.insert(text)
        {
            return Err(DeErr::new(ErrKind::DuplicateField(text.to_owned()))
                .at(key.pos)
                .blame(key.id()));
        }
        seed.deserialize(self.de.child(key, None))
            .map(Some)
            .map_err(|e| e.at(key.pos).blame(key.id()))
    }

    fn next_value_seed<V: de::DeserializeSeed<'de>>(&mut self, seed: V) -> Result<V::Value, DeErr> {
        let Some((key, value)) = self.current else {
            return Err(de::Error::custom("value requested before its key"));
        };
        seed.deserialize(self.de.child(value, Some(key)))
            .map_err(|mut e| {
                e.path
                    .push(key.text(self.de.cx.src).unwrap_or("?").to_owned());
                e.at(value.pos).blame(key.id())
            })
    }
}

/// Feeds [`SpVisitor`]: value line and column, key line and column, then the value itself.
struct SpanSeq<'a> {
    de: NodeDe<'a>,
    index: u8,
}

impl<'de> de::SeqAccess<'de> for SpanSeq<'_> {
    type Error = DeErr;

    fn next_element_seed<T: de::DeserializeSeed<'de>>(
        &mut self,
        seed: T,
    ) -> Result<Option<T::Value>, DeErr> {
        let pos = self.de.node.pos;
        let key = self.de.key.map_or(pos, |k| k.pos);
        let index = self.index;
        self.index = self.index.saturating_add(1);
        let number = match index {
            0 => pos.line,
            1 => pos.column,
            2 => key.line,
            3 => key.column,
            4 => return seed.deserialize(self.de).map(Some),
            _ => return Ok(None),
        };
        seed.deserialize(IntoDeserializer::<DeErr>::into_deserializer(number))
            .map(Some)
    }
}

/// The most errors reported for one section (a target, the defaults) before giving up on it.
const MAX_ERRORS: usize = 32;
/// The most deserialization attempts for one section.
const MAX_ATTEMPTS: usize = 4 * MAX_ERRORS;

/// Deserializes `T` from `node`, collecting every structural error.
///
/// Returns the value when one could be built (possibly with some entries excluded, in which case
/// the errors are not empty), and the errors with their positions and messages.
pub fn collect<T: DeserializeOwned>(node: &Node, src: &str) -> (Option<T>, Vec<(Pos, String)>) {
    let mut excluded = HashSet::new();
    let mut errors = Vec::new();
    // Every failed attempt either returns or excludes one more entry, so this terminates; the
    // bound keeps a hostile section with thousands of bad keys from costing quadratic time.
    for _ in 0..MAX_ATTEMPTS {
        let cx = Cx {
            src,
            excluded: &excluded,
        };
        let attempt = T::deserialize(NodeDe {
            node,
            key: None,
            cx: &cx,
        });
        match attempt {
            Ok(value) => return (Some(value), errors),
            Err(e) => {
                if !e.consequential {
                    errors.push((e.pos_or(node.pos), e.to_string()));
                }
                match e.entry {
                    Some(entry) if excluded.insert(entry) => {
                        if errors.len() >= MAX_ERRORS {
                            break;
                        }
                    }
                    _ => return (None, errors),
                }
            }
        }
    }
    errors.push((
        node.pos,
        "too many errors in this section; the rest of it was not checked".to_owned(),
    ));
    (None, errors)
}

/// Parser options that keep hostile input cheap: bounded nesting, aliases and sizes, no
/// includes. Duplicate keys are passed through so that they are reported per section (with the
/// rest of the section's errors) instead of failing the whole file.
pub fn yaml_options() -> serde_saphyr::Options {
    serde_saphyr::options! {
        budget: serde_saphyr::budget! {
            max_depth: 32,
            max_aliases: 10_000,
            max_anchors: 10_000,
            max_nodes: 250_000,
            max_total_scalar_bytes: 16 * 1024 * 1024,
        },
        alias_limits: serde_saphyr::alias_limits! {
            max_total_replayed_events: 100_000,
        },
        duplicate_keys: serde_saphyr::DuplicateKeyPolicy::PassThrough,
        strict_booleans: true,
        non_finite_float_policy: serde_saphyr::NonFiniteFloatPolicy::PassThrough,
        with_snippet: false,
    }
}

/// Where a syntax error is and what it says.
pub fn syntax_error(e: &serde_saphyr::Error) -> (Pos, String) {
    let pos = e.location().map_or(Pos::NONE, Pos::of);
    let message = serde_saphyr::MessageFormatter::format_message(
        &serde_saphyr::UserMessageFormatter,
        e.without_snippet(),
    );
    (pos, format!("invalid YAML: {message}"))
}

/// The value of `key` in the mapping `node`, unless absent or null.
pub fn value_of<'a>(node: &'a Node, src: &str, key: &str) -> Option<&'a Node> {
    node.entries()
        .iter()
        .find(|(k, _)| k.text(src) == Some(key))
        .map(|(_, value)| value)
        .filter(|value| !matches!(value.kind, Kind::Null))
}

/// Deserializes every item of the sequence `node` on its own, so that each item reports its own
/// structural errors (deserialized as part of the list, the first error would drop the whole
/// list). An item with structural errors is `None`: checking its values would report the
/// consequences of what was dropped from it. Each item comes with its position.
pub fn each<T: DeserializeOwned>(
    node: Option<&Node>,
    src: &str,
    diags: &mut Diags,
) -> Vec<Option<(T, Pos)>> {
    let Some(Node {
        kind: Kind::Seq(items),
        ..
    }) = node
    else {
        return Vec::new();
    };
    items
        .iter()
        .map(|item| {
            let (value, errors) = collect::<T>(item, src);
            let clean = errors.is_empty();
            diags.extend(errors);
            value.filter(|_| clean).map(|value| (value, item.pos))
        })
        .collect()
}
