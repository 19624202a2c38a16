//! Redaction of credentials in a job's session config before it is written.
//!
//! **Invariant:** a config value whose key matches the pattern never reaches
//! the disk; it is replaced by [`REDACTED`].

use regex::Regex;
use std::collections::BTreeMap;

/// What a redacted value is replaced by.
pub const REDACTED: &str = "*********(redacted)";

/// The default pattern, matched case-insensitively against config keys.
pub const DEFAULT_PATTERN: &str = r"(?i)secret|password|passwd|token|access[._-]?key|credential|private[._-]?key|session[._-]?key";

/// Decides which config keys hold secrets.
#[derive(Debug, Clone)]
pub struct Redactor {
    pub pattern: Regex,
}

impl Default for Redactor {
    fn default() -> Self {
        Self::new(DEFAULT_PATTERN).expect("the default pattern is valid")
    }
}

impl Redactor {
    /// A redactor for keys matching `pattern` (a regular expression; prefix
    /// it with `(?i)` to ignore case).
    pub fn new(pattern: &str) -> Result<Self, regex::Error> {
        Ok(Self {
            pattern: Regex::new(pattern)?,
        })
    }

    /// Whether `key` names a secret.
    pub fn is_secret(&self, key: &str) -> bool {
        self.pattern.is_match(key)
    }

    /// Redacts a `/config` response (a JSON object of strings): the value
    /// of every secret key that is set (non-empty) is replaced in place, so
    /// the bytes are otherwise unchanged, key order included. A body that is
    /// not such an object is replaced by `{}` rather than written unchecked.
    pub fn redact_config(&self, json: &str) -> String {
        let Ok(map) = serde_json::from_str::<BTreeMap<String, serde_json::Value>>(json) else {
            return "{}".to_string();
        };
        let secret_keys: Vec<&String> = map
            .iter()
            .filter(|(k, v)| {
                self.is_secret(k) && !matches!(v, serde_json::Value::String(s) if s.is_empty())
            })
            .map(|(k, _)| k)
            .collect();
        if secret_keys.is_empty() {
            return json.to_string();
        }
        let replacement = format!("\"{REDACTED}\"");
        let mut out = json.to_string();
        for key in secret_keys {
            let plain = key
                .chars()
                .all(|c| c != '"' && c != '\\' && !c.is_control());
            let ranges = if plain {
                bjh_format::record::string_values_of(out.as_bytes(), key)
            } else {
                Vec::new()
            };
            if ranges.len() != 1 {
                // A key this splice cannot locate exactly: rebuild the map.
                return self.rebuild(map);
            }
            out.replace_range(ranges[0].clone(), &replacement);
        }
        out
    }

    /// The values of the secret keys set in a `/config` response. Other
    /// responses can carry them too: the scheduler's `stage_plan` is a debug
    /// dump of the execution graph, session config included.
    pub fn secrets_in(&self, config_json: &str) -> Vec<String> {
        let Ok(map) = serde_json::from_str::<BTreeMap<String, serde_json::Value>>(config_json)
        else {
            return Vec::new();
        };
        let mut secrets: Vec<String> = map
            .into_iter()
            .filter(|(k, _)| self.is_secret(k))
            .filter_map(|(_, v)| match v {
                serde_json::Value::String(s) if !s.is_empty() => Some(s),
                _ => None,
            })
            .collect();
        // Longest first, so a secret containing another is replaced whole.
        secrets.sort_by_key(|s| std::cmp::Reverse(s.len()));
        secrets
    }

    /// Replaces every occurrence of each secret in `text`, as it is and as
    /// it appears escaped inside JSON strings (once, or twice for a debug
    /// dump embedded in JSON).
    pub fn scrub(&self, text: &str, secrets: &[String]) -> String {
        scrub(text, secrets)
    }

    pub fn rebuild(&self, map: BTreeMap<String, serde_json::Value>) -> String {
        let redacted: BTreeMap<String, serde_json::Value> = map
            .into_iter()
            .map(|(k, v)| {
                if self.is_secret(&k) {
                    (k, serde_json::Value::String(REDACTED.to_string()))
                } else {
                    (k, v)
                }
            })
            .collect();
        serde_json::to_string(&redacted).unwrap_or_else(|_| "{}".to_string())
    }
}

/// Replaces every occurrence of each secret in `text`, as it is and as it
/// appears escaped inside JSON strings (once, or twice for a debug dump
/// embedded in JSON). Needs no pattern: the secrets are the values.
pub(crate) fn scrub(text: &str, secrets: &[String]) -> String {
    let mut out = text.to_string();
    for secret in secrets {
        let json_once = json_escape(secret);
        let json_twice = json_escape(&json_once);
        for form in [json_twice, json_once, secret.clone()] {
            if !form.is_empty() && out.contains(&form) {
                out = out.replace(&form, REDACTED);
            }
        }
    }
    out
}

fn json_escape(s: &str) -> String {
    let quoted = serde_json::to_string(s).unwrap_or_default();
    quoted
        .get(1..quoted.len().saturating_sub(1))
        .unwrap_or_default()
        .to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn credential_keys_are_redacted_in_any_case() {
        let r = Redactor::default();
        let json = r#"{"datafusion.execution.batch_size":"8192","s3.Secret_Access_Key":"abc","my.PASSWORD":"pw","x.token":"t","aws.access_key_id":"AK","gcp.credentials":"c"}"#;
        let out = r.redact_config(json);
        for secret in ["\"abc\"", "\"pw\"", "\"t\"", "\"AK\"", "\"c\""] {
            assert!(!out.contains(secret), "{secret} leaked: {out}");
        }
        assert!(out.contains("\"8192\""));
        assert_eq!(out.matches(REDACTED).count(), 5);
    }

    #[test]
    fn redaction_keeps_key_order_and_empty_values() {
        let json = r#"{"z":"1","s3.secret_access_key":"abc","s3.session_token":"","a":"2"}"#;
        assert_eq!(
            Redactor::default().redact_config(json),
            format!(
                r#"{{"z":"1","s3.secret_access_key":"{REDACTED}","s3.session_token":"","a":"2"}}"#
            )
        );
    }

    #[test]
    fn secrets_are_scrubbed_from_other_payloads_in_every_escaping() {
        let r = Redactor::default();
        let secrets = r.secrets_in(r#"{"s3.secret_access_key":"p\"w/1","a":"p"}"#);
        assert_eq!(secrets, vec!["p\"w/1".to_string()]);
        let debug_in_json = r#"{"stage_plan":"S3 { secret: Some(\"p\\\"w/1\") }","raw":"p\"w/1"}"#;
        let out = r.scrub(debug_in_json, &secrets);
        assert!(!out.contains("w/1"), "{out}");
        assert!(
            serde_json::from_str::<serde_json::Value>(&out).is_ok(),
            "{out}"
        );
    }

    #[test]
    fn a_config_without_secrets_is_kept_byte_for_byte() {
        let json = r#"{"a":"1","b":"2"}"#;
        assert_eq!(Redactor::default().redact_config(json), json);
    }

    #[test]
    fn a_custom_pattern_replaces_the_default() {
        let r = Redactor::new("(?i)^ballista\\.internal\\.").unwrap();
        assert!(r.is_secret("ballista.internal.x"));
        assert!(!r.is_secret("my.password"));
    }
}
