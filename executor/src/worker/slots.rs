//! Executor slots, and lending one while a parent waits for its child (or a task waits for a
//! person's approval of a call: [`super::approvals`]; the same lending, one wait per task).
//!
//! An executor runs at most `concurrency` tasks at once. A parent blocked on a child does no
//! work, and the child may need this very executor (an Agent that delegates to itself, or a
//! chain through an Agent with `concurrency: 1`): holding the slot while waiting would
//! deadlock. So a waiting parent lends its slot out and takes one back when the child ends.
//! Its instance stays alive meanwhile, so the engine's pool has room for `waiting` parked
//! instances beside the running ones, and no more parents than that park at once: one that
//! finds no room keeps its slot (its child then runs on a peer, or ends at its deadline).
//!
//! A parent taking its slot back comes before new work: the claim loop holds a slot while it
//! waits for the next task, so it lets go when a parent asks ([`Slots::wanted_back`]), and the
//! semaphore's first-come order then gives the slot to the parent.
//!
//! In a pool pod a run also holds one of the pod's places, shared by all its Agents, and the
//! pod's one engine has instance slots for `concurrency` parked tasks beside the running ones
//! ([`PodCapacity`]). So a parked parent lends its place too (its child may be an Agent of the
//! same pod, which a full pod would otherwise hold off until the parent's deadline), parks only
//! while the pod has room for one more parked instance, and takes its slot back, then a place.

use std::future::Future;
use std::sync::{Arc, Mutex};
use std::task::Poll;

use tokio::runtime::Handle;
use tokio::sync::{Notify, OwnedSemaphorePermit, Semaphore, watch};

/// Parked tasks per concurrency slot, capped at [`MAX_WAITING`]: when the Agent may delegate,
/// a chain as deep as the grant allows can park on one executor; when it may call tools, each
/// running task may wait for an approval.
pub fn waiting_for(concurrency: usize, max_depth: Option<u32>, approvals: bool) -> usize {
    let parents = max_depth.map_or(0, |depth| {
        concurrency.saturating_mul(usize::try_from(depth.max(1)).unwrap_or(usize::MAX))
    });
    let approving = if approvals { concurrency } else { 0 };
    parents.saturating_add(approving).min(MAX_WAITING)
}

/// Most parents one executor parks at once (each keeps its instance's memory).
pub const MAX_WAITING: usize = 64;

/// What the executor process itself needs beside its tasks' instances (the runtime, the
/// compiled module, the API client's buffers), kept out of the parking budget.
pub const EXECUTOR_OVERHEAD_BYTES: u64 = 128 << 20;
/// Parking memory is counted in these units (a semaphore permit each).
const MIB: u64 = 1 << 20;

/// Memory parked parents may hold at once: what the pod's limit leaves after `concurrency`
/// running tasks at `task_memory` each and the executor's own overhead. `None` (no pod limit
/// known): parents are bounded by count only. A parked parent keeps its whole instance, so each
/// counts at its task's memory limit.
pub fn parking_budget(pod_limit: Option<u64>, concurrency: usize, task_memory: u64) -> Option<u64> {
    let running = u64::try_from(concurrency)
        .unwrap_or(u64::MAX)
        .saturating_mul(task_memory);
    pod_limit.map(|limit| {
        limit
            .saturating_sub(running)
            .saturating_sub(EXECUTOR_OVERHEAD_BYTES)
    })
}

/// The pod's memory limit, from its cgroup (v2, then v1); `None` when unlimited or unknown.
pub fn pod_memory_limit() -> Option<u64> {
    let read = |path: &str| std::fs::read_to_string(path).ok();
    let limit = read("/sys/fs/cgroup/memory.max")
        .or_else(|| read("/sys/fs/cgroup/memory/memory.limit_in_bytes"))?;
    // v2 writes `max`; v1 writes a page-rounded i64::MAX when unlimited.
    limit.trim().parse::<u64>().ok().filter(|l| *l < (1 << 62))
}

/// A pool pod's capacity, shared by the workers of all its Agents: its running places (a run
/// takes one beside its Agent's slot, only with a task in hand) and its room for parked tasks
/// (the engine's instance slots beyond the running ones).
#[derive(Clone)]
pub struct PodCapacity {
    places: Arc<Semaphore>,
    parking: Arc<Semaphore>,
}

impl PodCapacity {
    /// `concurrency` places, and room for as many parked tasks as a dedicated executor of that
    /// concurrency has when its Agent delegates to the default depth and may wait for
    /// approvals ([`waiting_for`]), and never less than one per place: the pod's engine holds
    /// [`Self::instances`].
    pub fn new(concurrency: usize) -> Self {
        Self {
            places: Arc::new(Semaphore::new(concurrency)),
            parking: Arc::new(Semaphore::new(Self::parking(concurrency))),
        }
    }

    fn parking(concurrency: usize) -> usize {
        waiting_for(
            concurrency,
            Some(ari_crds::delegation::DEFAULT_MAX_DEPTH),
            true,
        )
        .max(concurrency)
    }

    /// Instances the pool pod's engine must hold: every place running and every parked task.
    pub fn instances(concurrency: usize) -> usize {
        concurrency.saturating_add(Self::parking(concurrency))
    }
}

/// The executor's running and parking capacity.
pub struct Slots {
    running: Arc<Semaphore>,
    waiting: Arc<Semaphore>,
    /// The parking budget in MiB (see [`parking_budget`]); `None`: count only.
    parked_memory: Option<Arc<Semaphore>>,
    /// In a pool pod, the pod's places and parking room, shared with its other Agents.
    pod: Option<PodCapacity>,
    stop: watch::Receiver<bool>,
    /// Signalled when a parked parent wants a running slot back.
    returning: Notify,
}

impl Slots {
    pub fn new(
        concurrency: usize,
        waiting: usize,
        parked_memory: Option<u64>,
        pod: Option<PodCapacity>,
        stop: watch::Receiver<bool>,
    ) -> Arc<Self> {
        let mib = |bytes: u64| usize::try_from(bytes / MIB).unwrap_or(usize::MAX);
        Arc::new(Self {
            running: Arc::new(Semaphore::new(concurrency.max(1))),
            waiting: Arc::new(Semaphore::new(waiting)),
            parked_memory: parked_memory
                .map(|b| Arc::new(Semaphore::new(mib(b).min(Semaphore::MAX_PERMITS)))),
            pod,
            stop,
            returning: Notify::new(),
        })
    }

    /// Whether these are an Agent's slots in a pool pod.
    pub fn pooled(&self) -> bool {
        self.pod.is_some()
    }

    /// Waits for a free running slot; `None` once the executor is stopping.
    pub async fn acquire(self: &Arc<Self>) -> Option<Arc<Slot>> {
        let mut stop = self.stop.clone();
        let permit = tokio::select! {
            p = self.running.clone().acquire_owned() => p.ok()?,
            _ = stop.wait_for(|s| *s) => return None,
        };
        Some(Arc::new(Slot {
            permit: Mutex::new(Some(permit)),
            place: Mutex::default(),
            slots: self.clone(),
        }))
    }

    /// Resolves when a parked parent wants its slot back: whoever holds an idle slot (the
    /// claim loop waiting for a task) should drop it.
    pub async fn wanted_back(&self) {
        self.returning.notified().await;
    }

    /// Running slots free right now (for tests).
    #[cfg(test)]
    fn free(&self) -> usize {
        self.running.available_permits()
    }
}

/// The slot one task runs in (and in a pool pod its place in the pod); freed when dropped.
pub struct Slot {
    permit: Mutex<Option<OwnedSemaphorePermit>>,
    place: Mutex<Option<OwnedSemaphorePermit>>,
    slots: Arc<Slots>,
}

impl Slot {
    /// In a pool pod, waits for one of the pod's places (first come first served), held with
    /// this slot and lent with it; at once elsewhere. `false` once the executor is stopping.
    pub async fn take_place(&self) -> bool {
        let Some(pod) = &self.slots.pod else {
            return true;
        };
        let mut stop = self.slots.stop.clone();
        let place = tokio::select! {
            p = pod.places.clone().acquire_owned() => p.ok(),
            _ = stop.wait_for(|s| *s) => None,
        };
        let taken = place.is_some();
        *lock(&self.place) = place;
        taken
    }

    /// Lends the slot out while the caller, whose instance may hold up to `memory_bytes`, waits;
    /// the returned guard takes one back when dropped (blocking: call from the task's own
    /// blocking thread). Without room to park (too many parked, or their memory would pass the
    /// pod's parking budget), the slot is kept and the guard does nothing.
    pub fn lend(self: &Arc<Self>, handle: Handle, memory_bytes: u64) -> Lent {
        let room = self.slots.room_to_park(memory_bytes);
        let lent = match &room {
            Some(_) => lock(&self.permit).take().is_some(),
            None => false,
        };
        if lent {
            // Dropped here: the place goes back to the pod for the child, or anyone.
            drop(lock(&self.place).take());
        }
        Lent {
            slot: self.clone(),
            handle,
            lent,
            _parked: room,
        }
    }
}

/// Room for one parked parent: its place, its memory and, in a pool pod, the pod's room for
/// its instance, returned when dropped.
struct Parked {
    _place: OwnedSemaphorePermit,
    _memory: Option<OwnedSemaphorePermit>,
    _in_pod: Option<OwnedSemaphorePermit>,
}

impl Slots {
    fn room_to_park(&self, memory_bytes: u64) -> Option<Parked> {
        let in_pod = match &self.pod {
            None => None,
            Some(pod) => Some(pod.parking.clone().try_acquire_owned().ok()?),
        };
        let place = self.waiting.clone().try_acquire_owned().ok()?;
        let memory = match &self.parked_memory {
            None => None,
            Some(budget) => {
                let mib = u32::try_from(memory_bytes.div_ceil(MIB)).unwrap_or(u32::MAX);
                Some(budget.clone().try_acquire_many_owned(mib).ok()?)
            }
        };
        Some(Parked {
            _place: place,
            _memory: memory,
            _in_pod: in_pod,
        })
    }
}

/// A lent slot, taken back on drop.
pub struct Lent {
    slot: Arc<Slot>,
    handle: Handle,
    lent: bool,
    _parked: Option<Parked>,
}

impl Lent {
    /// Whether the slot was actually lent (there was room to park).
    pub fn is_lent(&self) -> bool {
        self.lent
    }
}

impl Drop for Lent {
    fn drop(&mut self) {
        if !self.lent {
            return;
        }
        let slots = self.slot.slots.clone();
        let mut stop = slots.stop.clone();
        let permit = self.handle.block_on(async move {
            let acquire = slots.running.clone().acquire_owned();
            tokio::pin!(acquire);
            // Queue up first, then ask the claim loop to let go: the slot it drops goes to
            // the first in the queue, which must be this parent, not the loop itself.
            let first = std::future::poll_fn(|cx| Poll::Ready(acquire.as_mut().poll(cx))).await;
            if let Poll::Ready(p) = first {
                return p.ok();
            }
            slots.returning.notify_one();
            // A stopping executor claims nothing new, so the parent just finishes; the drain
            // waits for every task, not for slots.
            tokio::select! {
                p = &mut acquire => p.ok(),
                _ = stop.wait_for(|s| *s) => None,
            }
        });
        let taken = permit.is_some();
        *lock(&self.slot.permit) = permit;
        // Then a place in the pod, in the claim loop's order (slot, then place), so the two
        // never wait on each other.
        if taken && self.slot.slots.pod.is_some() {
            let slot = self.slot.clone();
            self.handle.block_on(async move { slot.take_place().await });
        }
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn runtime() -> tokio::runtime::Runtime {
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()
            .unwrap_or_else(|e| panic!("runtime: {e}"))
    }

    #[test]
    fn a_waiting_parent_frees_its_slot_for_its_child_and_takes_one_back() {
        let rt = runtime();
        let (_tx, stop) = watch::channel(false);
        let slots = Slots::new(1, 3, None, None, stop);
        let parent = rt
            .block_on(slots.acquire())
            .unwrap_or_else(|| panic!("a slot"));
        assert_eq!(slots.free(), 0);
        let handle = rt.handle().clone();
        let lent = std::thread::spawn({
            let parent = parent.clone();
            move || parent.lend(handle, 64 << 20)
        })
        .join()
        .unwrap_or_else(|_| panic!("lend"));
        assert!(lent.is_lent());
        assert_eq!(slots.free(), 1, "the child can run here");
        let child = rt
            .block_on(slots.acquire())
            .unwrap_or_else(|| panic!("a slot"));
        drop(child);
        std::thread::spawn(move || drop(lent))
            .join()
            .unwrap_or_else(|_| panic!("take back"));
        assert_eq!(slots.free(), 0, "the parent runs in a slot again");
        drop(parent);
        assert_eq!(slots.free(), 1);
    }

    #[test]
    fn a_returning_parent_is_served_before_an_idle_claim_loop() {
        let rt = runtime();
        let (_tx, stop) = watch::channel(false);
        let slots = Slots::new(1, 1, None, None, stop);
        let parent = rt
            .block_on(slots.acquire())
            .unwrap_or_else(|| panic!("a slot"));
        let lent = parent.lend(rt.handle().clone(), 64 << 20);
        // The claim loop takes the lent slot and waits for work with it.
        let idle = rt
            .block_on(slots.acquire())
            .unwrap_or_else(|| panic!("a slot"));
        let returning = std::thread::spawn(move || drop(lent));
        rt.block_on(slots.wanted_back());
        drop(idle);
        // The loop cannot take it straight back: the parent was queued before it asked.
        assert!(slots.running.clone().try_acquire_owned().is_err());
        returning.join().unwrap_or_else(|_| panic!("take back"));
        assert_eq!(slots.free(), 0, "the parent has the slot");
        drop(parent);
        assert_eq!(slots.free(), 1);
    }

    #[test]
    fn without_room_to_park_a_parent_keeps_its_slot() {
        let rt = runtime();
        let (_tx, stop) = watch::channel(false);
        let slots = Slots::new(1, 0, None, None, stop);
        let parent = rt
            .block_on(slots.acquire())
            .unwrap_or_else(|| panic!("a slot"));
        let lent = parent.lend(rt.handle().clone(), 64 << 20);
        assert!(!lent.is_lent());
        assert_eq!(slots.free(), 0);
        drop(lent);
        drop(parent);
        assert_eq!(slots.free(), 1);
    }

    /// Issue 29 item 1: in a pool pod of one place, a parent of one Agent parks and lends its
    /// place with its slot, so its child, of another Agent of the pod, runs there at once; the
    /// parent then takes its slot and the place back. The pod parks no more tasks than its
    /// engine has spare instances for, whichever Agent asks (for one place: a chain to the
    /// default depth and an approval).
    #[test]
    fn a_parked_parent_in_a_pool_pod_lends_its_place_to_a_child_of_another_agent() {
        let rt = runtime();
        let (_tx, stop) = watch::channel(false);
        let pod = PodCapacity::new(1);
        let parents = Slots::new(1, 4, None, Some(pod.clone()), stop.clone());
        let children = Slots::new(1, 4, None, Some(pod.clone()), stop);
        let parent = rt
            .block_on(parents.acquire())
            .unwrap_or_else(|| panic!("a slot"));
        assert!(rt.block_on(parent.take_place()));
        assert_eq!(pod.places.available_permits(), 0, "the pod is full");
        let handle = rt.handle().clone();
        let lent = std::thread::spawn({
            let parent = parent.clone();
            move || parent.lend(handle, 64 << 20)
        })
        .join()
        .unwrap_or_else(|_| panic!("lend"));
        assert!(lent.is_lent());
        assert_eq!(pod.places.available_permits(), 1, "the place is lent");
        let child = rt
            .block_on(children.acquire())
            .unwrap_or_else(|| panic!("a slot"));
        assert!(rt.block_on(child.take_place()), "the child runs in the pod");
        // The pod parks no more than its engine has spare instances for.
        assert_eq!(PodCapacity::instances(1), 1 + 4);
        let room: Vec<_> =
            std::iter::from_fn(|| pod.parking.clone().try_acquire_owned().ok()).collect();
        assert_eq!(room.len(), 3, "one of the four is the parked parent's");
        assert!(
            !child.lend(rt.handle().clone(), 64 << 20).is_lent(),
            "no room in the pod's engine to park another task"
        );
        drop(room);
        drop(child);
        std::thread::spawn(move || drop(lent))
            .join()
            .unwrap_or_else(|_| panic!("take back"));
        assert_eq!(
            (parents.free(), pod.places.available_permits()),
            (0, 0),
            "the parent runs again, in its slot and the pod's place"
        );
        drop(parent);
        assert_eq!(pod.places.available_permits(), 1);
        assert_eq!(pod.parking.available_permits(), 4);
    }

    #[test]
    fn parked_parents_are_bounded_by_the_grant_depth_and_a_ceiling() {
        assert_eq!(waiting_for(4, None, false), 0);
        assert_eq!(waiting_for(1, Some(3), false), 3);
        assert_eq!(waiting_for(2, Some(0), false), 2);
        assert_eq!(waiting_for(100, Some(16), false), MAX_WAITING);
        assert_eq!(
            waiting_for(4, None, true),
            4,
            "one approval wait per running task"
        );
        assert_eq!(waiting_for(1, Some(3), true), 4);
    }

    /// Issue 26 item 18: a parked parent keeps its instance, so parking is bounded by memory
    /// too. A parent whose memory would pass the budget keeps its slot; one that fits parks,
    /// and its memory is free again once it takes its slot back.
    #[test]
    fn parked_parents_hold_memory_against_the_pods_budget() {
        let rt = runtime();
        let (_tx, stop) = watch::channel(false);
        let slots = Slots::new(2, 8, Some(100 << 20), None, stop);
        let first = rt
            .block_on(slots.acquire())
            .unwrap_or_else(|| panic!("a slot"));
        let second = rt
            .block_on(slots.acquire())
            .unwrap_or_else(|| panic!("a slot"));
        let parked = first.lend(rt.handle().clone(), 64 << 20);
        assert!(parked.is_lent(), "64 MiB fits a 100 MiB budget");
        let refused = second.lend(rt.handle().clone(), 64 << 20);
        assert!(
            !refused.is_lent(),
            "a second 64 MiB would pass it: keep the slot"
        );
        drop(refused);
        std::thread::spawn(move || drop(parked))
            .join()
            .unwrap_or_else(|_| panic!("take back"));
        let again = second.lend(rt.handle().clone(), 64 << 20);
        assert!(again.is_lent(), "the first parent's memory is free again");
        std::thread::spawn(move || drop(again))
            .join()
            .unwrap_or_else(|_| panic!("take back"));
    }

    #[test]
    fn the_parking_budget_is_what_the_pod_limit_leaves_after_running_tasks() {
        const M: u64 = 1 << 20;
        let cases = [
            (None, 4, 64 * M, None),
            (
                Some(1024 * M),
                4,
                64 * M,
                Some(1024 * M - 256 * M - EXECUTOR_OVERHEAD_BYTES),
            ),
            (Some(256 * M), 4, 64 * M, Some(0)),
            (Some(1024 * M), usize::MAX, u64::MAX, Some(0)),
        ];
        for (limit, concurrency, memory, want) in cases {
            assert_eq!(
                parking_budget(limit, concurrency, memory),
                want,
                "{limit:?}"
            );
        }
    }
}
