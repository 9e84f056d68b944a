//! A run's taps: what its guest logs, the text its model calls generate, its tool calls and
//! its usage so far, on their way to `status.liveLog` (written only while a gateway stream
//! follows the Task; see [`super::livelog`]).
//!
//! No tap ever blocks the run: each buffer is bounded, and what does not fit is dropped and
//! counted, so followers learn how much they missed while the trace keeps everything.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use ari_crds::a2a::LIVE_TEXT_BYTES;
use ari_crds::{LiveLog, LiveText, LiveToolEvent, LiveTools, LiveUsage, ModelCalls};
use ari_runtime::TaskRequest;
use ari_runtime::capability::{ModelTap, ToolTap};
use ari_runtime::model::ToolOutcome;
use tokio::sync::{mpsc, watch};

use super::livelog::LiveLogs;

/// Lines buffered between two looks; past it lines are left out of the live view (the
/// Task's full log is unaffected).
const LIVE_LOG_BUFFER: usize = 64;
/// Pieces of model text buffered between two looks; past it pieces are dropped and counted,
/// so followers learn how much they missed.
const LIVE_TEXT_BUFFER: usize = 256;
/// Tool events buffered between two looks; past it events are dropped and counted.
const LIVE_TOOL_BUFFER: usize = 64;

/// The receiving ends of one run's taps.
pub(super) struct Taps {
    lines: mpsc::Receiver<String>,
    text: mpsc::Receiver<String>,
    text_dropped: Arc<AtomicU64>,
    tools: mpsc::Receiver<LiveToolEvent>,
    tools_dropped: Arc<AtomicU64>,
    /// The newest usage the model and tool capabilities told (only the latest matters).
    usage: watch::Receiver<LiveUsage>,
}

impl Taps {
    /// Taps `req` from the start, so a stream that begins mid-run still gets the newest of
    /// everything. `uid`'s lease (in `live`) decides whether model calls stream.
    pub(super) fn attach(req: &mut TaskRequest, live: Arc<LiveLogs>, uid: &str) -> Self {
        let (lines_tx, lines) = mpsc::channel::<String>(LIVE_LOG_BUFFER);
        // Never blocks the guest: a full buffer leaves the line out of the live view.
        req.log_tap = Some(Arc::new(move |line: &str| {
            let _ = lines_tx.try_send(line.to_owned());
        }));
        let (usage_tx, usage) = watch::channel(LiveUsage::default());
        let usage_tx = Arc::new(usage_tx);
        let (text_tx, text) = mpsc::channel(LIVE_TEXT_BUFFER);
        let text_dropped = Arc::new(AtomicU64::new(0));
        req.model_tap = Some(Arc::new(TextTap {
            tx: text_tx,
            dropped: text_dropped.clone(),
            usage: usage_tx.clone(),
            live,
            uid: uid.to_owned(),
        }));
        let (tools_tx, tools) = mpsc::channel(LIVE_TOOL_BUFFER);
        let tools_dropped = Arc::new(AtomicU64::new(0));
        req.tool_tap = Some(Arc::new(ToolCallTap {
            tx: tools_tx,
            dropped: tools_dropped.clone(),
            usage: usage_tx,
        }));
        Self {
            lines,
            text,
            text_dropped,
            tools,
            tools_dropped,
            usage,
        }
    }

    /// Waits for the next tapped item and adds it to `live`. Cancel-safe (each branch is);
    /// once the run has closed every tap it never returns, so `select!` never picks it.
    pub(super) async fn next_into(&mut self, live: &mut LiveLog) {
        tokio::select! {
            Some(line) = next(&mut self.lines) => live.push(&line),
            Some(piece) = next(&mut self.text) => {
                push_text(live, &self.text_dropped, Some(&piece));
            }
            Some(event) = next(&mut self.tools) => {
                push_tool(live, &self.tools_dropped, Some(event));
            }
            () = changed(&mut self.usage) => self.take_usage(live),
        }
    }

    /// Adds everything still queued to `live`: the run has ended.
    pub(super) fn drain_into(&mut self, live: &mut LiveLog) {
        while let Ok(line) = self.lines.try_recv() {
            live.push(&line);
        }
        while let Ok(piece) = self.text.try_recv() {
            push_text(live, &self.text_dropped, Some(&piece));
        }
        push_text(live, &self.text_dropped, None);
        while let Ok(event) = self.tools.try_recv() {
            push_tool(live, &self.tools_dropped, Some(event));
        }
        push_tool(live, &self.tools_dropped, None);
        self.take_usage(live);
    }

    /// The usage told so far, once anything was told.
    fn take_usage(&mut self, live: &mut LiveLog) {
        let usage = self.usage.borrow_and_update();
        if *usage != LiveUsage::default() {
            live.usage = Some(usage.clone());
        }
    }
}

/// The next item of a tap, or never once the run closed it.
async fn next<T>(tap: &mut mpsc::Receiver<T>) -> Option<T> {
    match tap.recv().await {
        Some(item) => Some(item),
        None => std::future::pending().await,
    }
}

/// Returns when the usage changed, or never once the run closed the tap.
async fn changed<T>(tap: &mut watch::Receiver<T>) {
    if tap.changed().await.is_err() {
        std::future::pending::<()>().await;
    }
}

/// Model text and usage on their way to `status.liveLog`. It never blocks the call: a full
/// buffer drops the piece (counting its bytes), and a piece is kept to its last
/// [`LIVE_TEXT_BYTES`], all that `modelText` holds anyway. Memory is thus bounded by
/// [`LIVE_TEXT_BUFFER`] × [`LIVE_TEXT_BYTES`] per running Task.
struct TextTap {
    tx: mpsc::Sender<String>,
    dropped: Arc<AtomicU64>,
    usage: Arc<watch::Sender<LiveUsage>>,
    live: Arc<LiveLogs>,
    uid: String,
}

impl ModelTap for TextTap {
    fn followed(&self) -> bool {
        self.live.followed(&self.uid)
    }

    fn text(&self, piece: &str) {
        let mut start = piece.len().saturating_sub(LIVE_TEXT_BYTES);
        while !piece.is_char_boundary(start) {
            start += 1;
        }
        let mut lost = start as u64;
        if self.tx.try_send(piece[start..].to_owned()).is_err() {
            lost = piece.len() as u64;
        }
        if lost > 0 {
            self.dropped.fetch_add(lost, Ordering::Relaxed);
        }
    }

    fn usage(&self, so_far: &[ModelCalls]) {
        self.usage.send_modify(|u| u.models = so_far.to_vec());
    }
}

/// Adds model text to the live view, after counting what was dropped before it.
fn push_text(live: &mut LiveLog, dropped: &AtomicU64, piece: Option<&str>) {
    let skipped = dropped.swap(0, Ordering::Relaxed);
    if skipped == 0 && piece.is_none() {
        return;
    }
    let text = live.model_text.get_or_insert_with(LiveText::default);
    if skipped > 0 {
        text.skip(skipped);
    }
    if let Some(piece) = piece {
        text.push(piece);
    }
}

/// Tool calls on their way to `status.liveLog.tools`. Like [`TextTap`], it never blocks the
/// call: a full buffer drops the event and counts it; each event is cut to what the status
/// keeps before it is queued.
struct ToolCallTap {
    tx: mpsc::Sender<LiveToolEvent>,
    dropped: Arc<AtomicU64>,
    usage: Arc<watch::Sender<LiveUsage>>,
}

impl ToolCallTap {
    fn send(&self, event: LiveToolEvent) {
        if self.tx.try_send(event).is_err() {
            self.dropped.fetch_add(1, Ordering::Relaxed);
        }
    }
}

impl ToolTap for ToolCallTap {
    fn call(&self, server: &str, tool: &str, arguments: &str) {
        self.send(LiveToolEvent::new(server, tool, None, arguments));
    }

    fn result(&self, server: &str, tool: &str, outcome: ToolOutcome, text: &str) {
        self.send(LiveToolEvent::new(server, tool, Some(outcome), text));
    }

    fn usage(&self, tool_calls: u64) {
        self.usage.send_modify(|u| u.tool_calls = tool_calls);
    }
}

/// Adds a tool event to the live view, after counting what was dropped before it.
fn push_tool(live: &mut LiveLog, dropped: &AtomicU64, event: Option<LiveToolEvent>) {
    let skipped = dropped.swap(0, Ordering::Relaxed);
    if skipped == 0 && event.is_none() {
        return;
    }
    let tools = live.tools.get_or_insert_with(LiveTools::default);
    if skipped > 0 {
        tools.skip(skipped);
    }
    if let Some(event) = event {
        tools.push(event);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The tap never waits: with its buffer full, pieces are dropped and counted, and the
    /// live view tells followers how many bytes they missed; an oversized piece keeps its end.
    #[test]
    fn the_model_text_tap_drops_and_counts_rather_than_block() {
        let (tx, mut rx) = tokio::sync::mpsc::channel(2);
        let dropped = Arc::new(AtomicU64::new(0));
        let tap = TextTap {
            tx,
            dropped: dropped.clone(),
            usage: Arc::new(watch::channel(LiveUsage::default()).0),
            live: Arc::new(LiveLogs::new(Default::default())),
            uid: "uid-1".into(),
        };
        assert!(!tap.followed(), "no lease: not followed, so not streamed");
        for piece in ["He", "llo", " lost", " lost too"] {
            tap.text(piece);
        }
        assert_eq!(dropped.load(Ordering::Relaxed), 14, "two pieces dropped");
        let mut live = LiveLog::default();
        while let Ok(piece) = rx.try_recv() {
            push_text(&mut live, &dropped, Some(&piece));
        }
        let text = live.model_text.clone().expect("text");
        assert_eq!(text.seq, 5 + 14);
        // The drops are counted when the next piece is taken in: followers learn they missed
        // 14 bytes (where exactly is not kept).
        assert_eq!(text.since(0), ("Hello", 14));

        let big = "x".repeat(LIVE_TEXT_BYTES + 10);
        tap.text(&big);
        let kept = rx.try_recv().expect("kept");
        assert_eq!(kept.len(), LIVE_TEXT_BYTES);
        assert_eq!(
            dropped.load(Ordering::Relaxed),
            10,
            "the cut start is counted"
        );
    }

    /// Tool events likewise: a full buffer drops and counts them, never waits; each is cut to
    /// what the status keeps before it is queued.
    #[test]
    fn the_tool_tap_drops_and_counts_rather_than_block() {
        let (tx, mut rx) = tokio::sync::mpsc::channel(2);
        let dropped = Arc::new(AtomicU64::new(0));
        let tap = ToolCallTap {
            tx,
            dropped: dropped.clone(),
            usage: Arc::new(watch::channel(LiveUsage::default()).0),
        };
        tap.call("kit", "echo", &"a".repeat(1000));
        tap.result("kit", "echo", ToolOutcome::Answered, "a");
        tap.call("kit", "add", "{}");
        assert_eq!(dropped.load(Ordering::Relaxed), 1, "the third is dropped");
        let mut live = LiveLog::default();
        while let Ok(event) = rx.try_recv() {
            push_tool(&mut live, &dropped, Some(event));
        }
        let tools = live.tools.clone().expect("tools");
        assert_eq!(tools.seq, 3, "two kept, one counted");
        let (seen, missed) = tools.since(0);
        assert_eq!(missed, 1);
        assert_eq!(
            seen[0].preview.len(),
            ari_crds::a2a::LIVE_TOOL_PREVIEW_BYTES
        );
        assert_eq!(seen[1].outcome, Some(ToolOutcome::Answered));
    }

    fn calls(name: &str, output_tokens: u64) -> ModelCalls {
        ModelCalls {
            name: name.into(),
            usage: ari_crds::TokenUsage {
                calls: 1,
                output_tokens,
                ..Default::default()
            },
            ..Default::default()
        }
    }

    /// What the model and tool capabilities tell of their use reaches the live view as it
    /// changes (the newest account wins), and what is still queued when the run ends goes
    /// out with it; a run that called nothing has no usage at all.
    #[tokio::test]
    async fn the_usage_so_far_reaches_the_live_view_as_it_is_told() {
        let key = Arc::new(ed25519_dalek::SigningKey::from_bytes(&[7; 32]));
        let mut req = TaskRequest::new("t", "", key);
        let live_logs = Arc::new(LiveLogs::new(Default::default()));
        let mut taps = Taps::attach(&mut req, live_logs, "uid-1");
        let (model, tools) = (req.model_tap.clone(), req.tool_tap.clone());
        let (Some(model), Some(tools)) = (model, tools) else {
            panic!("both taps attached");
        };
        let mut live = LiveLog::default();
        taps.drain_into(&mut live);
        assert_eq!(live.usage, None, "nothing told, no usage");

        model.usage(&[calls("small", 10)]);
        taps.next_into(&mut live).await;
        let told = live.usage.clone().expect("usage");
        assert_eq!((told.models.len(), told.tool_calls), (1, 0));

        tools.usage(1);
        model.usage(&[calls("small", 25)]);
        taps.next_into(&mut live).await;
        let told = live.usage.clone().expect("usage");
        assert_eq!(told.models[0].usage.output_tokens, 25, "the newest account");
        assert_eq!(told.tool_calls, 1);
        assert_eq!(told.totals().output_tokens, 25);
        assert_eq!(told.totals().tool_calls, 1);

        tools.usage(2);
        drop(req);
        taps.drain_into(&mut live);
        assert_eq!(live.usage.map(|u| u.tool_calls), Some(2), "told at the end");
    }
}
