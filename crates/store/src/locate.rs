//! Finding the top-level fields of a `JobEnd` line without parsing its
//! payloads: a scan that knows only where JSON strings, objects and arrays
//! begin and end. A 50,000-task job's line is some 10 MB, nearly all of it
//! the `stages` payload; indexing it costs reading it, not building it.
//!
//! The scan is a locator, not a validator: the fields a summary needs
//! (`status`, `queued_at`, `index`, `dropped_records`, and the `job`
//! payload's logical plan) are then parsed by serde from their slices, and
//! each payload's range is checked against its key whenever it is read. A
//! line the scan cannot follow is left to the full parse.

/// Fields as `(key, value start, value end)`.
pub(super) type FieldRanges = Vec<(String, usize, usize)>;

/// The top-level fields of the `data` object of a `JobEnd` line, as byte
/// ranges (`start..end`) of the line.
#[derive(Debug, Default, PartialEq, Eq)]
pub(super) struct Fields {
    /// The envelope's schema version.
    pub(super) version: u32,
    /// `(key, value start, value end)`, in line order.
    pub(super) fields: FieldRanges,
}

impl Fields {
    /// The value of `key`, if present.
    pub(super) fn get<'a>(&self, line: &'a [u8], key: &str) -> Option<&'a [u8]> {
        self.fields
            .iter()
            .find(|(k, _, _)| k == key)
            .and_then(|&(_, s, e)| line.get(s..e))
    }

    /// The range of `key`'s value, as `[start, length]`.
    pub(super) fn range(&self, key: &str) -> Option<[u64; 2]> {
        self.fields
            .iter()
            .find(|(k, _, _)| k == key)
            .map(|&(_, s, e)| [s as u64, (e - s) as u64])
    }
}

fn skip_ws(b: &[u8], mut i: usize) -> usize {
    while i < b.len() && matches!(b[i], b' ' | b'\t' | b'\r' | b'\n') {
        i += 1;
    }
    i
}

/// The end (exclusive) of the string starting at `b[i] == '"'`.
fn skip_string(b: &[u8], i: usize) -> Option<usize> {
    let mut j = i + 1;
    loop {
        let k = j + memchr::memchr2(b'"', b'\\', b.get(j..)?)?;
        if b[k] == b'\\' {
            j = k + 2;
        } else {
            return Some(k + 1);
        }
    }
}

/// The end (exclusive) of the JSON value starting at `b[i]`.
fn skip_value(b: &[u8], mut i: usize) -> Option<usize> {
    match *b.get(i)? {
        b'"' => skip_string(b, i),
        b'{' | b'[' => {
            let mut depth = 0usize;
            while i < b.len() {
                match b[i] {
                    b'"' => {
                        i = skip_string(b, i)?;
                        continue;
                    }
                    b'{' | b'[' => depth += 1,
                    b'}' | b']' => {
                        depth = depth.checked_sub(1)?;
                        if depth == 0 {
                            return Some(i + 1);
                        }
                    }
                    _ => {}
                }
                i += 1;
            }
            None
        }
        _ => {
            let start = i;
            while i < b.len() && !matches!(b[i], b',' | b'}' | b']' | b' ' | b'\t' | b'\r' | b'\n')
            {
                i += 1;
            }
            (i > start).then_some(i)
        }
    }
}

/// The start of the string whose closing quote is `b[e - 1]`: the
/// previous quote not escaped (preceded by an even number of backslashes).
fn skip_string_back(b: &[u8], e: usize) -> Option<usize> {
    let mut j = e.checked_sub(1)?;
    loop {
        let q = memchr::memrchr(b'"', &b[..j])?;
        let slashes = b[..q].iter().rev().take_while(|&&c| c == b'\\').count();
        if slashes % 2 == 0 {
            return Some(q);
        }
        j = q;
    }
}

/// The start of the JSON value ending (exclusive) at `e`.
fn skip_value_back(b: &[u8], e: usize) -> Option<usize> {
    let last = *b.get(e.checked_sub(1)?)?;
    match last {
        b'"' => skip_string_back(b, e),
        b'}' | b']' => {
            let mut depth = 0usize;
            let mut i = e;
            while i > 0 {
                i -= 1;
                match b[i] {
                    b'"' => i = skip_string_back(b, i + 1)?,
                    b'}' | b']' => depth += 1,
                    b'{' | b'[' => {
                        depth = depth.checked_sub(1)?;
                        if depth == 0 {
                            return Some(i);
                        }
                    }
                    _ => {}
                }
            }
            None
        }
        _ => {
            let mut i = e;
            while i > 0
                && !matches!(
                    b[i - 1],
                    b',' | b':' | b'{' | b'[' | b' ' | b'\t' | b'\r' | b'\n'
                )
            {
                i -= 1;
            }
            (i < e).then_some(i)
        }
    }
}

fn skip_ws_back(b: &[u8], mut e: usize) -> usize {
    while e > 0 && matches!(b[e - 1], b' ' | b'\t' | b'\r' | b'\n') {
        e -= 1;
    }
    e
}

/// The fields of a `JobEnd` line in the layout every writer uses, without
/// reading the `stages` payload (nearly all of a big job's line): the
/// fields before it from the front, the fields after it from the back,
/// down to `config`, the field every writer puts right after `stages`.
/// `None` when the line is not laid out so (the full scan then reads it).
pub(super) fn job_end_fields_fast(line: &[u8]) -> Option<Fields> {
    job_end_fields_ends(line, line, line.len())
}

/// [`job_end_fields_fast`] over the two ends of a line of `len` bytes:
/// `head` is its first bytes, `tail` its last (the whole line may be both).
/// The ranges are the line's. `None` when the fields before `stages` are
/// not all in `head`, those after it not all in `tail`, or the layout is
/// another (the whole line is then read).
pub(super) fn job_end_fields_ends(head: &[u8], tail: &[u8], len: usize) -> Option<Fields> {
    let base = len.checked_sub(tail.len())?;
    // A tail that starts inside a run of backslashes could misread which
    // quote is escaped; such a cut is left to the whole line.
    if base > 0 && tail.first() == Some(&b'\\') {
        return None;
    }
    let (mut out, stages_start) = front(head)?;
    let (back, stages_end) = back(tail, stages_start.saturating_sub(base))?;
    let stages_end = stages_end + base;
    let close = stages_end.checked_sub(1)?.checked_sub(base)?;
    if stages_end <= stages_start
        || tail.get(close) != Some(&b'}')
        || head.get(stages_start) != Some(&b'{')
    {
        return None;
    }
    out.fields.push((
        bjh_format::record::payload::STAGES.to_string(),
        stages_start,
        stages_end,
    ));
    out.fields.extend(
        back.into_iter()
            .rev()
            .map(|(key, start, end)| (key, start + base, end + base)),
    );
    Some(out)
}

/// From the front, the fields before the `stages` key, and where the
/// `stages` value starts.
fn front(line: &[u8]) -> Option<(Fields, usize)> {
    let (mut out, mut i) = head(line)?;
    loop {
        let (key, start) = key_at(line, i)?;
        if key == bjh_format::record::payload::STAGES {
            return Some((out, start));
        }
        let end = skip_value(line, start)?;
        out.fields.push((key.to_string(), start, end));
        i = skip_ws(line, end);
        if line.get(i) != Some(&b',') {
            return None;
        }
        i += 1;
    }
}

/// From the back: the envelope's and the data's closing braces, then field
/// by field down to `config`; the fields (last first) and where the value
/// before `config` ends. A key at or before `floor` is declined (the scan
/// has run into the front's fields).
fn back(line: &[u8], floor: usize) -> Option<(FieldRanges, usize)> {
    let mut e = skip_ws_back(line, line.len());
    if e == 0 || line[e - 1] != b'}' {
        return None;
    }
    e = skip_ws_back(line, e - 1);
    if e == 0 || line[e - 1] != b'}' {
        return None;
    }
    e = skip_ws_back(line, e - 1);
    let mut fields = Vec::new();
    loop {
        let start = skip_value_back(line, e)?;
        let colon = skip_ws_back(line, start);
        if colon == 0 || line[colon - 1] != b':' {
            return None;
        }
        let key_end = skip_ws_back(line, colon - 1);
        let key_start = skip_string_back(line, key_end)?;
        let key = std::str::from_utf8(&line[key_start + 1..key_end - 1]).ok()?;
        if key == bjh_format::record::payload::STAGES || key_start <= floor {
            return None;
        }
        fields.push((key.to_string(), start, e));
        let comma = skip_ws_back(line, key_start);
        if comma == 0 || line[comma - 1] != b',' {
            return None;
        }
        e = skip_ws_back(line, comma - 1);
        if key == bjh_format::record::payload::CONFIG {
            return Some((fields, e));
        }
    }
}

/// The envelope's head up to the `data` object's first field: the
/// version, and where the fields begin.
fn head(line: &[u8]) -> Option<(Fields, usize)> {
    const HEAD: &[u8] = br#"{"ev":"JobEnd","version":"#;
    let rest = line.strip_prefix(HEAD)?;
    let digits = rest.iter().take_while(|b| b.is_ascii_digit()).count();
    let version = std::str::from_utf8(&rest[..digits]).ok()?.parse().ok()?;
    let i = HEAD.len() + digits;
    line[i..].strip_prefix(br#","data":{"#)?;
    let fields = Fields {
        version,
        fields: Vec::new(),
    };
    Some((fields, i + 9))
}

/// The key at `i` (after whitespace) and where its value starts.
fn key_at(line: &[u8], i: usize) -> Option<(&str, usize)> {
    let i = skip_ws(line, i);
    if line.get(i) != Some(&b'"') {
        return None;
    }
    let key_end = skip_string(line, i)?;
    let key = std::str::from_utf8(&line[i + 1..key_end - 1]).ok()?;
    let colon = skip_ws(line, key_end);
    if line.get(colon) != Some(&b':') {
        return None;
    }
    Some((key, skip_ws(line, colon + 1)))
}

/// The value of `key` among the top-level fields of the JSON object
/// `obj`, found by the same scan (the other values are skipped, not read).
pub(super) fn object_field<'a>(obj: &'a [u8], key: &str) -> Option<&'a [u8]> {
    let mut i = skip_ws(obj, 0);
    if obj.get(i) != Some(&b'{') {
        return None;
    }
    i += 1;
    if obj.get(skip_ws(obj, i)) == Some(&b'}') {
        return None;
    }
    loop {
        let (k, start) = key_at(obj, i)?;
        let end = skip_value(obj, start)?;
        if k == key {
            return obj.get(start..end);
        }
        i = skip_ws(obj, end);
        if obj.get(i) != Some(&b',') {
            return None;
        }
        i += 1;
    }
}

/// The top-level fields of a `JobEnd` line's `data` object, for a line
/// that starts as every writer starts it (`{"ev":"JobEnd","version":N,
/// "data":{`); `None` for any other line, or one the scan cannot follow.
pub(super) fn job_end_fields(line: &[u8]) -> Option<Fields> {
    if let Some(fast) = job_end_fields_fast(line) {
        return Some(fast);
    }
    job_end_fields_full(line)
}

/// [`job_end_fields`] by a scan of the whole line.
fn job_end_fields_full(line: &[u8]) -> Option<Fields> {
    let (mut out, mut i) = head(line)?;
    loop {
        i = skip_ws(line, i);
        if line.get(i) == Some(&b'}') {
            break;
        }
        let key_end = skip_string(line, i)?;
        let key = std::str::from_utf8(&line[i + 1..key_end - 1]).ok()?;
        i = skip_ws(line, key_end);
        if line.get(i) != Some(&b':') {
            return None;
        }
        let start = skip_ws(line, i + 1);
        let end = skip_value(line, start)?;
        out.fields.push((key.to_string(), start, end));
        i = skip_ws(line, end);
        match line.get(i)? {
            b',' => i += 1,
            b'}' => break,
            _ => return None,
        }
    }
    // The envelope closes after `data`, and nothing follows.
    let tail = skip_ws(line, i + 1);
    (line.get(tail) == Some(&b'}') && skip_ws(line, tail + 1) == line.len()).then_some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The ranges agree with serde's own reading of the same line (its
    /// borrowed raw values), key by key.
    #[test]
    fn fields_are_where_serde_finds_them() {
        let line = br#"{"ev":"JobEnd","version":1,"data":{"status":{"Failed":"a \"quoted\" } brace"},"queued_at":1,"index":{"job_id":"x","n":[1,{"k":"]"}]},"job":{"logical_plan":"P\\n"},"stages":{"stages":[{"tasks":[{"s":"{"}]}]},"config":{},"dot":"digraph \"x\" {}","dropped_records":0}}"#;
        let fields = job_end_fields(line).unwrap();
        let parsed: serde_json::Map<String, serde_json::Value> =
            serde_json::from_slice::<serde_json::Value>(line).unwrap()["data"]
                .as_object()
                .unwrap()
                .clone();
        let mut keys: Vec<&str> = fields.fields.iter().map(|(k, _, _)| k.as_str()).collect();
        keys.sort_unstable();
        assert_eq!(keys, parsed.keys().map(String::as_str).collect::<Vec<_>>());
        for (key, value) in &parsed {
            let slice = fields.get(line, key).unwrap();
            let reparsed: serde_json::Value = serde_json::from_slice(slice).unwrap();
            assert_eq!(&reparsed, value, "{key}");
        }
    }

    /// The scan that skips `stages` finds what the whole scan finds, on
    /// upstream's layout and on ours (more fields after `dot`), and
    /// declines a layout it does not know.
    #[test]
    fn skipping_stages_finds_what_the_whole_scan_finds() {
        let upstream = br#"{"ev":"JobEnd","version":1,"data":{"status":"Succeeded","queued_at":1,"started_at":2,"completed_at":3,"index":{"job_id":"x"},"job":{"logical_plan":"a \"}\" b\\"},"stages":{"stages":[{"tasks":[{"s":"},\"config\":{"}]}]},"config":{"k":"v \\\" }"},"dot":"digraph \"x\" {\n}"}}"#;
        let ours = br#"{"ev":"JobEnd","version":1,"data":{"status":"Cancelled","queued_at":1,"started_at":2,"completed_at":3,"index":{},"job":{},"stages":{"stages":[]},"config":{},"dot":"","dropped_records":12,"responses":{"job":{"tree":"same"},"missing":["dot"]}}}"#;
        for line in [&upstream[..], &ours[..]] {
            let fast = job_end_fields_fast(line).expect("the known layout");
            assert_eq!(Some(fast), job_end_fields_full(line));
        }
        let odd = br#"{"ev":"JobEnd","version":1,"data":{"status":"Succeeded","index":{},"stages":{},"other":1,"config":{}}}"#;
        let wrong = br#"{"ev":"JobEnd","version":1,"data":{"status":"Succeeded","index":{},"config":{},"stages":{}}}"#;
        // Another field between stages and config: declined (its value is
        // not an object's end), and left to the whole scan.
        assert!(job_end_fields_fast(odd).is_none());
        assert!(job_end_fields_full(odd).is_some());
        assert!(job_end_fields_fast(wrong).is_none());
    }

    /// Read by its ends, a line gives what the whole scan gives, or
    /// nothing: for every cut of a line whose strings hold escaped quotes,
    /// runs of backslashes and JSON-looking text on both sides of `stages`.
    #[test]
    fn the_ends_of_a_line_give_the_whole_scans_fields_or_none() {
        let line = br#"{"ev":"JobEnd","version":1,"data":{"status":{"Failed":"a \\\" },\"config\":{"},"queued_at":17,"index":{"job_id":"x\\"},"job":{"logical_plan":"P \"stages\":{ \\"},"stages":{"stages":[{"s":"},\"config\":{\\\\"}]},"config":{"k":"\\\\\",\\\"dot\\\":\"v"},"dot":"digraph \"x\\\" {}","dropped_records":3,"responses":{"missing":["\\\"dot"]}}}"#;
        let whole = job_end_fields_full(line).expect("a line the scan follows");
        let mut found = 0;
        for h in 0..=line.len() {
            for t in 0..=line.len() {
                let got = job_end_fields_ends(&line[..h], &line[line.len() - t..], line.len());
                if let Some(got) = got {
                    assert_eq!(got, whole, "head {h}, tail {t}");
                    found += 1;
                }
            }
        }
        assert!(found > 0, "some cuts hold every field");
        assert_eq!(
            job_end_fields_ends(line, line, line.len()),
            Some(whole),
            "the whole line as both ends"
        );
    }

    #[test]
    fn a_field_of_an_object() {
        let job = br#"{"job_id":"x","stage_plan":"a \"logical_plan\": no","n":{"logical_plan":1},"logical_plan":"P"}"#;
        assert_eq!(object_field(job, "logical_plan"), Some(&br#""P""#[..]));
        assert_eq!(object_field(job, "absent"), None);
        assert_eq!(object_field(b"{}", "k"), None);
        assert_eq!(object_field(b"[1]", "k"), None);
    }

    #[test]
    fn lines_it_cannot_follow_are_left_to_the_parser() {
        for bad in [
            &br#"{"ev":"JobEnd","version":1,"data":{"status":"Succeeded","job":{"a":1}"#[..],
            br#"{"ev":"JobEnd","version":1,"data":{"status":"Succeeded"}} trailing"#,
            br#"{"version":1,"ev":"JobEnd","data":{}}"#,
            br#"{"ev":"TaskEnd","version":1,"data":{}}"#,
            br#"{"ev":"JobEnd","version":1,"data":{"status" "x"}}"#,
        ] {
            assert_eq!(
                job_end_fields(bad),
                None,
                "{}",
                String::from_utf8_lossy(bad)
            );
        }
        let empty = job_end_fields(br#"{"ev":"JobEnd","version":1,"data":{}}"#).unwrap();
        assert!(empty.fields.is_empty());
    }
}
