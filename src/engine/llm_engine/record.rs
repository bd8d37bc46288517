//! The engine's record read from outside ([`LlmEngine`]'s accessors over [`Record`]): trace
//! events on and off, the recent steps and finished requests, the running counters.
use super::history::FinishedSummary;
use super::LlmEngine;
use crate::engine::step_output::StepRecord;
use crate::engine::trace::TraceEvent;
use std::collections::VecDeque;
use std::time::Duration;

impl LlmEngine<'_> {
    /// Record trace events from now on (`true`) or stop (`false`, the default; drops what
    /// was not taken). Each step adds a handful of plain values; take them with
    /// [`Self::take_trace`] after every step.
    pub fn record_trace(&mut self, on: bool) {
        self.record.trace = on.then(Vec::new);
    }

    /// The trace events since the last call (empty while recording is off).
    pub fn take_trace(&mut self) -> Vec<TraceEvent> {
        match &mut self.record.trace {
            Some(t) => std::mem::take(t),
            None => Vec::new(),
        }
    }

    /// The last [`super::RECENT_STEPS`] steps, oldest first (kept whatever `keep_steps` says).
    pub fn recent_steps(&self) -> &VecDeque<StepRecord> {
        &self.record.recent_steps
    }

    /// The last [`super::RECENT_FINISHED`] requests that ended, oldest first.
    pub fn recent_finished(&self) -> &VecDeque<FinishedSummary> {
        &self.record.recent_finished
    }

    /// Steps that ran a forward pass so far (the step number of the last one).
    pub fn steps_run(&self) -> u64 {
        self.record.steps_run
    }

    /// Wall time of every step so far.
    pub fn step_time(&self) -> Duration {
        self.record.step_time
    }

    /// Requests added so far.
    pub fn requests_added(&self) -> u64 {
        self.next_id as u64
    }

    /// Requests ended so far (finished, failed or aborted).
    pub fn requests_finished(&self) -> u64 {
        self.record.requests_finished
    }

    /// Tokens sampled so far.
    pub fn generated_tokens(&self) -> u64 {
        self.record.generated_tokens
    }
}
