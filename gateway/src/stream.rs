//! A Task followed to its end as canonical events: read once, then every change the hub
//! passes on (its own and its children's), until `done` or `error`.

use ari_crds::Task;
use futures::Stream;
use kube::Api;
use tokio::sync::broadcast::error::RecvError;

use crate::events::{Event, Follow};
use crate::hub::Update;

use crate::limits::StreamPermit;

struct State {
    name: String,
    api: Api<Task>,
    rx: tokio::sync::broadcast::Receiver<Update>,
    follow: Follow,
    pending: std::collections::VecDeque<Event>,
    first: Option<Task>,
    finished: bool,
    _permit: StreamPermit,
}

/// The events of `name` from `first` to its end. `rx` must come from [`crate::hub::Hub::subscribe`]
/// *before* `first` was read, so no change between the two is lost. The permit is held for
/// as long as the stream lives.
pub fn follow(
    name: &str,
    api: Api<Task>,
    rx: tokio::sync::broadcast::Receiver<Update>,
    first: Task,
    permit: StreamPermit,
) -> impl Stream<Item = Event> + Send + 'static + use<> {
    let state = State {
        name: name.to_owned(),
        api,
        rx,
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
            match s.rx.recv().await {
                Ok(Update::Task(t)) => s.pending.extend(s.follow.task(&t)),
                Ok(Update::Child(c)) => {
                    let parent = s.name.clone();
                    s.pending.extend(s.follow.child(&parent, &c));
                }
                Ok(Update::Deleted) => s.pending.push_back(Event::Error {
                    task: s.name.clone(),
                    message: "the task was deleted".into(),
                }),
                // Fell behind: what was skipped is summed up by the Task as it is now.
                Err(RecvError::Lagged(_)) => match s.api.get_opt(&s.name).await {
                    Ok(Some(t)) => s.pending.extend(s.follow.task(&t)),
                    Ok(None) => s.pending.push_back(Event::Error {
                        task: s.name.clone(),
                        message: "the task was deleted".into(),
                    }),
                    Err(_) => s.pending.push_back(Event::Error {
                        task: s.name.clone(),
                        message: "lost track of the task; subscribe again".into(),
                    }),
                },
                Err(RecvError::Closed) => s.pending.push_back(Event::Error {
                    task: s.name.clone(),
                    message: "the gateway is stopping".into(),
                }),
            }
        }
    })
}
