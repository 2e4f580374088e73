//! Server-sent events as a client reads them, bounded: the model executor's streams and an
//! A2A agent's (docs/model.md §11.9, docs/a2a.md §13.4).

/// Server-sent-event framing with bounds: lines (`\n`, `\r\n`), `data:` fields joined by
/// `\n`, an event dispatched at a blank line; comments and other fields ignored.
pub(crate) struct Frames {
    line: Vec<u8>,
    data: Option<String>,
    max: usize,
    what: &'static str,
    key: &'static str,
}

impl Frames {
    /// Events of at most `max` bytes; errors name the stream (`what`) and the key of the bound.
    pub(crate) fn new(max: usize, what: &'static str, key: &'static str) -> Self {
        Self {
            line: Vec::new(),
            data: None,
            max,
            what,
            key,
        }
    }

    fn over(&self) -> String {
        format!(
            "{}: an event is over {} bytes ({})",
            self.what, self.max, self.key
        )
    }

    /// Takes the next bytes; returns the `data` of every event they complete.
    pub(crate) fn push(&mut self, mut bytes: &[u8]) -> Result<Vec<String>, String> {
        let mut out = Vec::new();
        while let Some(at) = memchr::memchr(b'\n', bytes) {
            if self.line.len() + at > self.max {
                return Err(self.over());
            }
            self.line.extend_from_slice(&bytes[..at]);
            bytes = &bytes[at + 1..];
            let line = std::mem::take(&mut self.line);
            if let Some(data) = self.line_done(&line)? {
                out.push(data);
            }
        }
        if self.line.len() + bytes.len() > self.max {
            return Err(self.over());
        }
        self.line.extend_from_slice(bytes);
        Ok(out)
    }

    /// One complete line; the event's data when the line is blank and ends one.
    fn line_done(&mut self, line: &[u8]) -> Result<Option<String>, String> {
        let line = line.strip_suffix(b"\r").unwrap_or(line);
        if line.is_empty() {
            return Ok(self.data.take());
        }
        let Some(value) = line.strip_prefix(b"data:") else {
            // A comment (`:`), or a field the loop does not use (`event`, `id`, `retry`).
            return Ok(None);
        };
        let value = value.strip_prefix(b" ").unwrap_or(value);
        let value = std::str::from_utf8(value)
            .map_err(|_| format!("{}: an event is not UTF-8", self.what))?;
        let data = self.data.get_or_insert_with(String::new);
        if data.len() + value.len() + 1 > self.max {
            return Err(self.over());
        }
        if !data.is_empty() {
            data.push('\n');
        }
        data.push_str(value);
        Ok(None)
    }

    /// The data of an event the body ended in without its blank line.
    pub(crate) fn finish(&mut self) -> Option<String> {
        let line = std::mem::take(&mut self.line);
        if !line.is_empty() {
            let _ = self.line_done(&line);
        }
        self.data.take()
    }
}
