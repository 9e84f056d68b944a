//! Executor slots, and lending one while a parent waits for its child.
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

use std::future::Future;
use std::sync::{Arc, Mutex};
use std::task::Poll;

use tokio::runtime::Handle;
use tokio::sync::{Notify, OwnedSemaphorePermit, Semaphore, watch};

/// Parked parents per concurrency slot when the Agent may delegate, capped at
/// [`MAX_WAITING`]: a chain as deep as the grant allows can park on one executor.
pub fn waiting_for(concurrency: usize, max_depth: Option<u32>) -> usize {
    match max_depth {
        None => 0,
        Some(depth) => concurrency
            .saturating_mul(usize::try_from(depth.max(1)).unwrap_or(usize::MAX))
            .min(MAX_WAITING),
    }
}

/// Most parents one executor parks at once (each keeps its instance's memory).
pub const MAX_WAITING: usize = 64;

/// The executor's running and parking capacity.
pub struct Slots {
    running: Arc<Semaphore>,
    waiting: Arc<Semaphore>,
    stop: watch::Receiver<bool>,
    /// Signalled when a parked parent wants a running slot back.
    returning: Notify,
}

impl Slots {
    pub fn new(concurrency: usize, waiting: usize, stop: watch::Receiver<bool>) -> Arc<Self> {
        Arc::new(Self {
            running: Arc::new(Semaphore::new(concurrency.max(1))),
            waiting: Arc::new(Semaphore::new(waiting)),
            stop,
            returning: Notify::new(),
        })
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

/// The slot one task runs in; freed when dropped.
pub struct Slot {
    permit: Mutex<Option<OwnedSemaphorePermit>>,
    slots: Arc<Slots>,
}

impl Slot {
    /// Lends the slot out while the caller waits; the returned guard takes one back when
    /// dropped (blocking: call from the task's own blocking thread). Without room to park,
    /// the slot is kept and the guard does nothing.
    pub fn lend(self: &Arc<Self>, handle: Handle) -> Lent {
        let parked = self.slots.waiting.clone().try_acquire_owned().ok();
        let lent = match &parked {
            Some(_) => lock(&self.permit).take().is_some(),
            None => false,
        };
        Lent {
            slot: self.clone(),
            handle,
            lent,
            _parked: parked,
        }
    }
}

/// A lent slot, taken back on drop.
pub struct Lent {
    slot: Arc<Slot>,
    handle: Handle,
    lent: bool,
    _parked: Option<OwnedSemaphorePermit>,
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
        *lock(&self.slot.permit) = permit;
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
        let slots = Slots::new(1, 3, stop);
        let parent = rt
            .block_on(slots.acquire())
            .unwrap_or_else(|| panic!("a slot"));
        assert_eq!(slots.free(), 0);
        let handle = rt.handle().clone();
        let lent = std::thread::spawn({
            let parent = parent.clone();
            move || parent.lend(handle)
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
        let slots = Slots::new(1, 1, stop);
        let parent = rt
            .block_on(slots.acquire())
            .unwrap_or_else(|| panic!("a slot"));
        let lent = parent.lend(rt.handle().clone());
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
        let slots = Slots::new(1, 0, stop);
        let parent = rt
            .block_on(slots.acquire())
            .unwrap_or_else(|| panic!("a slot"));
        let lent = parent.lend(rt.handle().clone());
        assert!(!lent.is_lent());
        assert_eq!(slots.free(), 0);
        drop(lent);
        drop(parent);
        assert_eq!(slots.free(), 1);
    }

    #[test]
    fn parked_parents_are_bounded_by_the_grant_depth_and_a_ceiling() {
        assert_eq!(waiting_for(4, None), 0);
        assert_eq!(waiting_for(1, Some(3)), 3);
        assert_eq!(waiting_for(2, Some(0)), 2);
        assert_eq!(waiting_for(100, Some(16)), MAX_WAITING);
    }
}
