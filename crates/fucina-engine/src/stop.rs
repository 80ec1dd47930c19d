//! Stop strings over streamed text, with hold-back: text that could still be the
//! start of a stop string is held until the next piece decides, so a stop string
//! split over several tokens is never emitted, and everything else is emitted as
//! soon as it cannot be part of one.

use crate::error::{invalid, Result};

/// Matches a set of stop strings against text pushed piece by piece.
#[derive(Clone, Debug, Default)]
pub struct StopMatcher {
    stops: Vec<String>,
    held: String,
}

/// What a push decided.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StopPush {
    /// Text that is final (never part of a stop string).
    pub emit: String,
    /// The index (in the order given) of the stop string that matched, if one did;
    /// `emit` then ends just before it and the matcher is done.
    pub stopped: Option<usize>,
}

impl StopMatcher {
    /// A matcher for `stops` (an empty list never stops; an empty string is an error).
    pub fn new(stops: Vec<String>) -> Result<StopMatcher> {
        if stops.iter().any(String::is_empty) {
            return Err(invalid("stop", "stop strings must not be empty"));
        }
        Ok(StopMatcher {
            stops,
            held: String::new(),
        })
    }

    /// The stop strings.
    pub fn stops(&self) -> &[String] {
        &self.stops
    }

    /// Add `text`. The earliest match wins (the first listed on a tie).
    pub fn push(&mut self, text: &str) -> StopPush {
        if self.stops.is_empty() {
            return StopPush {
                emit: text.to_owned(),
                stopped: None,
            };
        }
        self.held.push_str(text);
        let found = self
            .stops
            .iter()
            .enumerate()
            .filter_map(|(i, s)| self.held.find(s.as_str()).map(|at| (at, i)))
            .min();
        if let Some((at, i)) = found {
            let emit = self.held[..at].to_owned();
            self.held.clear();
            return StopPush {
                emit,
                stopped: Some(i),
            };
        }
        let keep = self.partial_suffix_len();
        let cut = self.held.len() - keep;
        let emit = self.held[..cut].to_owned();
        self.held.drain(..cut);
        StopPush {
            emit,
            stopped: None,
        }
    }

    /// End of text: everything held is final.
    pub fn flush(&mut self) -> String {
        std::mem::take(&mut self.held)
    }

    /// Length of the longest suffix of the held text that is a proper prefix of a stop
    /// string (so it must wait for more text).
    fn partial_suffix_len(&self) -> usize {
        let h = &self.held;
        let longest = self.stops.iter().map(String::len).max().unwrap_or(0);
        let first = h.len().saturating_sub(longest.saturating_sub(1));
        (first..h.len())
            .filter(|&at| h.is_char_boundary(at))
            .find(|&at| self.stops.iter().any(|s| s.starts_with(&h[at..])))
            .map_or(0, |at| h.len() - at)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(stops: &[&str], pieces: &[&str]) -> (String, Option<usize>) {
        let mut m = StopMatcher::new(stops.iter().map(|s| s.to_string()).collect()).unwrap();
        let mut out = String::new();
        for p in pieces {
            let r = m.push(p);
            out += &r.emit;
            if r.stopped.is_some() {
                return (out, r.stopped);
            }
        }
        out += &m.flush();
        (out, None)
    }

    #[test]
    fn split_stop_is_never_emitted() {
        assert_eq!(
            run(
                &["\n\nUser:"],
                &["Hi", " there", "\n", "\nUs", "er:", " more"]
            ),
            ("Hi there".into(), Some(0))
        );
    }

    #[test]
    fn partial_match_that_fails_is_released() {
        let mut m = StopMatcher::new(vec!["END".into()]).unwrap();
        assert_eq!(m.push("abcE").emit, "abc");
        assert_eq!(m.push("Nx").emit, "ENx");
        assert_eq!(m.flush(), "");
    }

    #[test]
    fn earliest_match_wins_then_first_listed() {
        assert_eq!(run(&["b", "ab"], &["xab"]), ("x".into(), Some(1)));
        assert_eq!(run(&["ab", "a"], &["xab"]), ("x".into(), Some(0)));
    }

    #[test]
    fn multibyte_text_is_cut_on_char_boundaries() {
        assert_eq!(run(&["é!"], &["café", "?"]), ("café?".into(), None));
        assert_eq!(run(&["é!"], &["caf", "é", "!"]), ("caf".into(), Some(0)));
    }

    #[test]
    fn no_stops_emits_everything_and_empty_is_rejected() {
        assert_eq!(run(&[], &["a", "b"]), ("ab".into(), None));
        assert!(StopMatcher::new(vec![String::new()]).is_err());
    }
}
