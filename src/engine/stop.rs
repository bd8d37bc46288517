//! Stop strings over streamed text: emit only what cannot be the start of a stop string.

/// Holds back streamed text that might be the beginning of a stop string.
#[derive(Debug, Default)]
pub struct StopMatcher {
    stops: Vec<String>,
    pending: String,
}

impl StopMatcher {
    /// A matcher for `stops` (empty strings are ignored).
    pub fn new(stops: &[String]) -> StopMatcher {
        StopMatcher {
            stops: stops.iter().filter(|s| !s.is_empty()).cloned().collect(),
            pending: String::new(),
        }
    }

    /// Add `delta`; returns (text safe to emit, whether a stop string was reached). After a
    /// stop, the text before the stop string is returned and the rest is dropped.
    pub fn push(&mut self, delta: &str) -> (String, bool) {
        self.pending.push_str(delta);
        if let Some(at) = self
            .stops
            .iter()
            .filter_map(|s| self.pending.find(s.as_str()))
            .min()
        {
            let out = self.pending[..at].to_string();
            self.pending.clear();
            return (out, true);
        }
        let hold = self
            .stops
            .iter()
            .map(|s| longest_suffix_prefix(&self.pending, s))
            .max()
            .unwrap_or(0);
        let cut = self.pending.len() - hold;
        let out = self.pending[..cut].to_string();
        self.pending.drain(..cut);
        (out, false)
    }

    /// The held-back text at the end of generation.
    pub fn flush(&mut self) -> String {
        std::mem::take(&mut self.pending)
    }
}

/// Length in bytes of the longest suffix of `text` that is a proper prefix of `stop`,
/// on char boundaries.
fn longest_suffix_prefix(text: &str, stop: &str) -> usize {
    (1..stop.len().min(text.len() + 1))
        .rev()
        .find(|&n| {
            stop.is_char_boundary(n)
                && text.is_char_boundary(text.len() - n)
                && text.ends_with(&stop[..n])
        })
        .unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn holds_back_partial_stop_and_cuts_at_it() {
        let mut m = StopMatcher::new(&["\n\nUser:".to_string()]);
        assert_eq!(m.push("Hello"), ("Hello".to_string(), false));
        assert_eq!(m.push(" world\n"), (" world".to_string(), false));
        assert_eq!(m.push("\nUs"), (String::new(), false));
        assert_eq!(m.push("er: hi"), (String::new(), true));
    }

    #[test]
    fn releases_false_alarm() {
        let mut m = StopMatcher::new(&["END".to_string()]);
        assert_eq!(m.push("EN"), (String::new(), false));
        assert_eq!(m.push("D?"), (String::new(), true));
        let mut m = StopMatcher::new(&["END".to_string()]);
        assert_eq!(m.push("EN"), (String::new(), false));
        assert_eq!(m.push("ter"), ("ENter".to_string(), false));
        assert_eq!(m.flush(), "");
    }

    #[test]
    fn multibyte_text_is_safe() {
        let mut m = StopMatcher::new(&["é!".to_string()]);
        assert_eq!(m.push("café"), ("caf".to_string(), false));
        assert_eq!(m.flush(), "é");
    }
}
