//! `speculative` (nanollm's extension): one request's speculative decoding — `false` for
//! plain decoding, `true` for prompt lookup with the defaults, or an object with vLLM's
//! setting names (`method`, `num_speculative_tokens`, `prompt_lookup_min`,
//! `prompt_lookup_max`) and `force`; `"method": "draft_model"` (or `"draft"`) drafts with
//! the server's `--draft-model`. Absent or null: the server's `--spec`.
use crate::engine::spec::{SpecChoice, Speculative, MAX_NGRAM, MAX_SPEC_TOKENS};
use crate::openai::field_error::{FieldError, Parsed};
use serde_json::{Map, Value};

/// Drafts per step when the object does not say (as `--spec-tokens`' default).
const DEFAULT_K: u64 = 4;

/// Parse `o["speculative"]`. Errors: a value that is not a boolean, null or an object, an
/// unknown key or method, a setting out of range — each naming `speculative.<key>`.
pub fn speculative(o: &Map<String, Value>) -> Parsed<SpecChoice> {
    let spec = match o.get("speculative") {
        None | Some(Value::Null) => return Ok(SpecChoice::Engine),
        Some(Value::Bool(false)) => return Ok(SpecChoice::Off),
        Some(Value::Bool(true)) => Map::new(),
        Some(Value::Object(m)) => m.clone(),
        Some(v) => {
            return Err(FieldError::new(
                "speculative",
                format!("expected true, false or an object such as {{\"method\": \"ngram\", \"num_speculative_tokens\": 4}}, got {v}"),
            ))
        }
    };
    const KEYS: [&str; 5] = [
        "method",
        "num_speculative_tokens",
        "prompt_lookup_min",
        "prompt_lookup_max",
        "force",
    ];
    if let Some(k) = spec.keys().find(|k| !KEYS.contains(&k.as_str())) {
        return Err(FieldError::new(
            &format!("speculative.{k}"),
            format!("unknown setting; expected one of {}", KEYS.join(", ")),
        ));
    }
    let draft_model = match spec.get("method") {
        None | Some(Value::Null) => false,
        Some(Value::String(m)) if m == "ngram" => false,
        Some(Value::String(m)) if m == "draft_model" || m == "draft" => true,
        Some(v) => {
            return Err(FieldError::new(
                "speculative.method",
                format!("expected \"ngram\" (prompt lookup) or \"draft_model\" (the server's --draft-model), got {v}"),
            ))
        }
    };
    if draft_model {
        if let Some(k) = ["prompt_lookup_min", "prompt_lookup_max"]
            .into_iter()
            .find(|k| spec.get(*k).is_some_and(|v| !v.is_null()))
        {
            return Err(FieldError::new(
                &format!("speculative.{k}"),
                "a prompt-lookup setting; the draft_model method does not use it".to_string(),
            ));
        }
    }
    let int = |key: &str, default: u64, lo: u64, hi: u64| -> Parsed<usize> {
        let n = match spec.get(key) {
            None | Some(Value::Null) => default,
            Some(v) => v.as_u64().ok_or_else(|| {
                FieldError::new(
                    &format!("speculative.{key}"),
                    format!("expected an integer {lo} to {hi}, got {v}"),
                )
            })?,
        };
        if !(lo..=hi).contains(&n) {
            return Err(FieldError::new(
                &format!("speculative.{key}"),
                format!("expected an integer {lo} to {hi}, got {n}"),
            ));
        }
        Ok(n as usize)
    };
    let k = int(
        "num_speculative_tokens",
        DEFAULT_K,
        1,
        MAX_SPEC_TOKENS as u64,
    )?;
    let top = MAX_NGRAM as u64;
    let min = int("prompt_lookup_min", 1, 1, top)?;
    let max = int("prompt_lookup_max", 3.max(min as u64), min as u64, top)?;
    let force = match spec.get("force") {
        None | Some(Value::Null) => false,
        Some(Value::Bool(b)) => *b,
        Some(v) => {
            return Err(FieldError::new(
                "speculative.force",
                format!("expected true or false, got {v}"),
            ))
        }
    };
    let made = if draft_model {
        Speculative::draft(k)
    } else {
        Speculative::ngram(k, min, max)
    };
    let mut s = made.map_err(|e| FieldError::new("speculative", format!("{e:#}")))?;
    s.force = force;
    Ok(SpecChoice::On(s))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn parse(v: Value) -> Parsed<SpecChoice> {
        let o = json!({ "speculative": v });
        speculative(o.as_object().unwrap())
    }

    #[test]
    fn the_forms() {
        assert_eq!(speculative(&Map::new()).unwrap(), SpecChoice::Engine);
        assert_eq!(parse(Value::Null).unwrap(), SpecChoice::Engine);
        assert_eq!(parse(json!(false)).unwrap(), SpecChoice::Off);
        let d = Speculative::ngram(4, 1, 3).unwrap();
        assert_eq!(parse(json!(true)).unwrap(), SpecChoice::On(d));
        let mut s = Speculative::ngram(8, 2, 5).unwrap();
        s.force = true;
        let v = json!({"method": "ngram", "num_speculative_tokens": 8, "prompt_lookup_min": 2, "prompt_lookup_max": 5, "force": true});
        assert_eq!(parse(v).unwrap(), SpecChoice::On(s));
        let draft = Speculative::draft(2).unwrap();
        for m in ["draft_model", "draft"] {
            let v = json!({"method": m, "num_speculative_tokens": 2});
            assert_eq!(parse(v).unwrap(), SpecChoice::On(draft));
        }
    }

    #[test]
    fn bad_settings_name_their_key() {
        for (v, param) in [
            (json!(3), "speculative"),
            (
                json!({"num_speculative_tokens": 0}),
                "speculative.num_speculative_tokens",
            ),
            (
                json!({"num_speculative_tokens": 17}),
                "speculative.num_speculative_tokens",
            ),
            (json!({"method": "eagle"}), "speculative.method"),
            (
                json!({"method": "draft_model", "prompt_lookup_min": 2}),
                "speculative.prompt_lookup_min",
            ),
            (
                json!({"prompt_lookup_min": 4, "prompt_lookup_max": 2}),
                "speculative.prompt_lookup_max",
            ),
            (json!({"k": 2}), "speculative.k"),
            (json!({"force": "yes"}), "speculative.force"),
        ] {
            let e = parse(v.clone()).unwrap_err();
            assert_eq!(e.param.as_deref(), Some(param), "{v}: {e:?}");
        }
    }
}
