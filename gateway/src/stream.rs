//! A Task followed to its end as canonical events: its first version, then each newer one the
//! hub hands on (its own and its children's), until `done` or `error`.

use ari_crds::Task;
use futures::Stream;

use crate::events::{Event, Follow};
use crate::hub::Follower;
use crate::limits::StreamPermit;

struct State {
    name: String,
    follower: Follower,
    follow: Follow,
    pending: std::collections::VecDeque<Event>,
    first: Option<Task>,
    finished: bool,
    _permit: StreamPermit,
}

/// The events of `name` from `first` to its end. `follower` must come from
/// [`crate::hub::Hub::follow`] *before* `first` was read, so no change between the two is lost.
/// The stream holds one look's events at a time; a reader that falls behind sees the Task as it
/// is when it reads again (log lines skipped are counted in `missed`). The permit is held for as
/// long as the stream lives.
pub fn follow(
    name: &str,
    follower: Follower,
    first: Task,
    permit: StreamPermit,
) -> impl Stream<Item = Event> + Send + 'static + use<> {
    let state = State {
        name: name.to_owned(),
        follower,
        follow: Follow::default(),
        pending: Default::default(),
        first: Some(first),
        finished: false,
        _permit: permit,
    };
    futures::stream::unfold(state, |mut s| async move {
        loop {
            if let Some(ev) = s.pending.pop_front() {
                if ev.is_last() {
                    s.finished = true;
                    s.pending.clear();
                }
                return Some((ev, s));
            }
            if s.finished {
                return None;
            }
            if let Some(task) = s.first.take() {
                s.pending.extend(s.follow.task(&task));
                continue;
            }
            let events = match s.follower.rx.changed().await {
                Ok(()) => look(&mut s),
                Err(_) => vec![Event::Error {
                    task: s.name.clone(),
                    message: "the gateway is stopping".into(),
                }],
            };
            s.pending.extend(events);
        }
    })
}

/// The events of the newest snapshot: children first (a child's end comes before its
/// parent's), then the Task itself.
fn look(s: &mut State) -> Vec<Event> {
    let snapshot = s.follower.rx.borrow_and_update();
    if snapshot.deleted {
        return vec![Event::Error {
            task: s.name.clone(),
            message: "the task was deleted".into(),
        }];
    }
    let mut out = Vec::new();
    for child in snapshot.children.values() {
        out.extend(s.follow.child(&s.name, child));
    }
    if let Some(task) = &snapshot.task {
        out.extend(s.follow.task(task));
    }
    out
}
