//! The engine's shared parts: the published set of targets, the scheduler that runs them, and the
//! context every target shares (the hub among it).

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use arc_swap::ArcSwap;
use parking_lot::Mutex;

use super::effects::Hub;
use super::runtime::{Context, Target};
use super::view::{EngineError, TargetStatus};
use crate::cluster::{Membership, Published};
use crate::scheduler::Scheduler;
use crate::target::TargetId;

/// The targets by id: replaced whole by each apply, read without a lock.
pub(super) type Targets = BTreeMap<TargetId, Arc<Target>>;

pub(super) struct Inner {
    pub targets: ArcSwap<Targets>,
    pub scheduler: Scheduler,
    pub ctx: Arc<Context>,
    /// The last listing's copy of each target's status, with the version it was built at
    /// ([`Engine::listing`](super::Engine::listing)); empty until someone lists. Held by a
    /// listing while it takes each target's lock in turn, and taken nowhere else.
    pub listing: Mutex<HashMap<TargetId, (u32, Arc<TargetStatus>)>>,
    /// This engine's place in a cluster, once it joined one. Its lock is also the apply lock:
    /// held by an apply, and by a change of the member set, throughout, so that the two never
    /// interleave. It is the one lock under which others are taken (a target's, then the
    /// hub's), and only there.
    pub membership: Mutex<Option<Membership>>,
    /// Verdicts published in the cluster for targets this engine does not have yet (a source
    /// that declares them may reach the members at different times): a target resumes from
    /// its own when it arrives. Taken alone, never with another lock.
    pub published: Mutex<HashMap<TargetId, Published>>,
}

impl Inner {
    pub fn hub(&self) -> &Hub {
        &self.ctx.hub
    }

    pub fn target(&self, id: &TargetId) -> Result<Arc<Target>, EngineError> {
        self.targets
            .load()
            .get(id)
            .cloned()
            .ok_or_else(|| EngineError::UnknownTarget(id.clone()))
    }

    /// Brings the state machines of members whose standing moved in line with their pools.
    pub fn sync_ejections(&self, moved: &[(TargetId, bool)]) {
        if moved.is_empty() {
            return;
        }
        let targets = self.targets.load();
        for (id, out) in moved {
            if let Some(target) = targets.get(id) {
                target.set_ejected(*out);
            }
        }
    }
}
