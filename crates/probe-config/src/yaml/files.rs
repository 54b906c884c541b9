//! Where documents come from: the files of a config path, read with bounds, and the [`Source`]
//! a document is parsed against (the directory its relative paths start from, and where
//! `${VAR}` references are looked up).
//!
//! Kept apart from parsing so that parsing never touches the disk: [`super::parse`] and etcd
//! values go through the same parser as files, with a `Source` of their own.

use std::fs;
use std::io::Read;
use std::path::{Path, PathBuf};

use super::diagnostics::{ConfigErrors, file_error};

/// The largest configuration file read; larger ones are rejected rather than parsed.
const MAX_FILE_BYTES: u64 = 16 * 1024 * 1024;

/// A variable of the process environment; one that is not valid UTF-8 counts as unset.
pub fn process_env(name: &str) -> Option<String> {
    std::env::var(name).ok()
}

/// What parsing needs to know about where a document comes from.
pub struct Source<'a> {
    /// The directory relative paths are resolved against.
    pub(crate) dir: &'a Path,
    /// Looks up `${VAR}` references.
    pub(crate) env: &'a dyn Fn(&str) -> Option<String>,
}

impl<'a> Source<'a> {
    /// The source of a document read from (or named after) `file`: its relative paths start
    /// from the file's directory.
    pub fn new(file: &'a Path, env: &'a dyn Fn(&str) -> Option<String>) -> Self {
        Self {
            dir: file.parent().unwrap_or(Path::new("")),
            env,
        }
    }
}

/// The files to load: `path` itself, or the YAML files of the directory `path`, by name.
pub fn list_files(path: &Path) -> Result<Vec<PathBuf>, ConfigErrors> {
    let metadata = fs::metadata(path).map_err(|e| file_error(path, format!("cannot read: {e}")))?;
    if !metadata.is_dir() {
        return Ok(vec![path.to_path_buf()]);
    }
    let entries =
        fs::read_dir(path).map_err(|e| file_error(path, format!("cannot read directory: {e}")))?;
    let mut files = Vec::new();
    for entry in entries {
        let entry = entry.map_err(|e| file_error(path, format!("cannot read directory: {e}")))?;
        let file = entry.path();
        let yaml = file
            .extension()
            .is_some_and(|ext| ext == "yaml" || ext == "yml");
        // Symlinks are followed; a dangling one is kept so that reading it reports the problem.
        if yaml && !file.is_dir() {
            files.push(file);
        }
    }
    if files.is_empty() {
        return Err(file_error(
            path,
            "no *.yaml or *.yml files in this directory".to_owned(),
        ));
    }
    files.sort_by(|a, b| a.file_name().cmp(&b.file_name()));
    Ok(files)
}

/// The text of `file`, or why it cannot be read, worded for an error at the file (not found,
/// not UTF-8, too large).
pub fn read_file(file: &Path) -> Result<String, String> {
    let handle = fs::File::open(file).map_err(|e| format!("cannot read: {e}"))?;
    let mut bytes = Vec::new();
    handle
        .take(MAX_FILE_BYTES + 1)
        .read_to_end(&mut bytes)
        .map_err(|e| format!("cannot read: {e}"))?;
    if u64::try_from(bytes.len()).unwrap_or(u64::MAX) > MAX_FILE_BYTES {
        return Err(format!(
            "file is larger than {} MiB",
            MAX_FILE_BYTES / (1024 * 1024)
        ));
    }
    String::from_utf8(bytes).map_err(|e| {
        format!(
            "file is not valid UTF-8 (at byte {})",
            e.utf8_error().valid_up_to()
        )
    })
}
