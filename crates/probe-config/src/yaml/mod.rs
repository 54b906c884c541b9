//! Reading YAML with every value located: a file read from disk (`files`), parsed into a tree
//! whose every node knows its line and column (`node`), and problems worded at the position
//! they concern (`diagnostics`, `words`).
//!
//! The configuration's sections read their parts with these, and so do the daemon's importers
//! of `blackbox.yml` and Gatus files, so an error in any file a user hands the daemon reads the
//! same: `FILE:LINE:COL: message`, with a did-you-mean where a word is close to a known one.

pub(crate) mod diagnostics;
pub(crate) mod files;
pub(crate) mod node;
pub(crate) mod words;

pub use diagnostics::{
    ConfigError, ConfigErrors, did_you_mean, file_error, located, one_line, quote,
};
pub use files::read_file;
pub use node::{
    Diags, Entries, Kind, Node, OneOrMany, Pos, Sp, collect, each, syntax_error, value_of,
    yaml_options,
};
pub use words::one_of;
