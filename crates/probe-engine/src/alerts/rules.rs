//! Which rule each target and group alerts by: the files' (as of their last good load, so a
//! reload changes them at once), then, for what only etcd declares, the entry's own `alert` key
//! over the files' defaults.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use parking_lot::Mutex;
use probe::TargetId;
use tokio::sync::watch;

use probe_config::{AlertRule, Config, TargetAlert};

/// The files' rules: each declared target's and group's (`None`: `alert: false`), and the
/// defaults, which also apply to etcd's entries.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct FileRules {
    /// By id.
    pub by_id: BTreeMap<TargetId, Option<AlertRule>>,
    /// `alerts.defaults`.
    pub defaults: AlertRule,
}

impl FileRules {
    /// The rules `config` gives.
    pub fn of(config: &Config) -> Self {
        Self {
            by_id: config.alert_rules.clone(),
            defaults: config
                .alerts
                .as_ref()
                .map(|a| a.defaults.clone())
                .unwrap_or_default(),
        }
    }
}

/// The topology's end of the rules: it sends the files' after every good load, and records
/// etcd's entries' `alert` keys as it decodes them.
pub struct RuleSink {
    /// The files' rules.
    pub files: watch::Sender<Arc<FileRules>>,
    /// etcd's entries' keys.
    pub declared: Arc<DeclaredAlerts>,
}

/// The alerting loop's end of the rules.
#[derive(Clone)]
pub struct RuleFeed {
    /// The files' rules.
    pub files: watch::Receiver<Arc<FileRules>>,
    /// etcd's entries' `alert` keys.
    pub declared: Arc<DeclaredAlerts>,
}

/// Both ends, starting from the rules `config` gives.
pub fn channel(config: &Config) -> (RuleSink, RuleFeed) {
    let (files, feed) = watch::channel(Arc::new(FileRules::of(config)));
    let declared = Arc::new(DeclaredAlerts::default());
    (
        RuleSink {
            files,
            declared: declared.clone(),
        },
        RuleFeed {
            files: feed,
            declared,
        },
    )
}

/// The `alert` keys of etcd's entries, set by the etcd decoder as it reads them.
#[derive(Debug, Default)]
pub struct DeclaredAlerts {
    /// A blocking mutex: each use is one insert, or one copy by the alerting loop after a change.
    keys: Mutex<BTreeMap<TargetId, TargetAlert>>,
    /// Bumped by every change, so the loop copies only after one.
    version: AtomicU64,
}

impl DeclaredAlerts {
    /// Records entry `id`'s `alert` key.
    pub fn set(&self, id: TargetId, alert: TargetAlert) {
        let mut keys = self.keys.lock();
        if keys.get(&id) != Some(&alert) {
            keys.insert(id, alert);
            self.version.fetch_add(1, Ordering::AcqRel);
        }
    }
}

/// The rules as the alerting loop looks them up.
pub(super) struct Rules {
    files: watch::Receiver<Arc<FileRules>>,
    declared: Arc<DeclaredAlerts>,
    current: Arc<FileRules>,
    /// etcd's entries that the files do not declare, resolved over the defaults.
    resolved: BTreeMap<TargetId, Option<AlertRule>>,
    version: u64,
}

impl Rules {
    pub fn new(files: watch::Receiver<Arc<FileRules>>, declared: Arc<DeclaredAlerts>) -> Self {
        let current = files.borrow().clone();
        let mut rules = Self {
            current,
            files,
            declared,
            resolved: BTreeMap::new(),
            version: u64::MAX,
        };
        rules.refresh();
        rules
    }

    /// A receiver that sees the files' reloads, to wake on them.
    pub fn reloads(&self) -> watch::Receiver<Arc<FileRules>> {
        self.files.clone()
    }

    /// Takes a reload or a change of etcd's entries into account.
    pub fn refresh(&mut self) {
        let reloaded = self.files.has_changed().unwrap_or(false);
        let version = self.declared.version.load(Ordering::Acquire);
        if !reloaded && version == self.version {
            return;
        }
        self.current = self.files.borrow_and_update().clone();
        self.version = version;
        let keys = self.declared.keys.lock().clone();
        self.resolved = keys
            .iter()
            .filter(|(id, _)| !self.current.by_id.contains_key(*id))
            .map(|(id, alert)| (id.clone(), alert.over(&self.current.defaults)))
            .collect();
    }

    /// The rule of `id`; `None` when it does not alert.
    pub fn of(&self, id: &TargetId) -> Option<&AlertRule> {
        match self.current.by_id.get(id).or_else(|| self.resolved.get(id)) {
            Some(rule) => rule.as_ref(),
            None => Some(&self.current.defaults),
        }
    }
}
