//! The `tojson` filter as transformers defines it for chat templates: Python's
//! `json.dumps(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False)`, not
//! Jinja's HTML-escaping `tojson` (transformers `chat_template_utils._compile_jinja_template`).
use minijinja::value::{Kwargs, Value, ValueKind};
use minijinja::{Error, ErrorKind};

/// Options of Python's `json.dumps` that transformers' `tojson` exposes.
#[derive(Debug, Clone)]
struct Options {
    ensure_ascii: bool,
    indent: Option<String>,
    item_sep: String,
    key_sep: String,
    sort_keys: bool,
}

/// `value | tojson(indent=None, ensure_ascii=False, separators=None, sort_keys=False)`;
/// `indent` may also come first positionally, as in `tojson(4)`. `indent` is a count of
/// spaces or a string. Default separators are `", "` and `": "`, or `","` and `": "` with an
/// indent, as in Python.
///
/// Errors: unknown keyword arguments, a value JSON cannot hold (e.g. a function).
pub fn tojson(value: Value, indent: Option<Value>, kwargs: Kwargs) -> Result<String, Error> {
    let indent = match indent {
        Some(v) => Some(v),
        None => kwargs.get::<Option<Value>>("indent")?,
    };
    let indent = match indent {
        None => None,
        Some(v) if v.is_none() => None,
        Some(v) => match (v.as_str(), v.as_i64()) {
            (Some(s), _) => {
                super::guard::check_width("tojson indent", s.len() as u64)?;
                Some(s.to_string())
            }
            (_, Some(n)) => {
                let n = u64::try_from(n).unwrap_or(0);
                super::guard::check_width("tojson indent", n)?;
                Some(" ".repeat(n as usize))
            }
            _ => {
                return Err(Error::new(
                    ErrorKind::InvalidOperation,
                    "tojson: indent must be a number or a string",
                ))
            }
        },
    };
    let (item_sep, key_sep) = match kwargs.get::<Option<Vec<String>>>("separators")? {
        Some(seps) if seps.len() == 2 => (seps[0].clone(), seps[1].clone()),
        Some(_) => {
            return Err(Error::new(
                ErrorKind::InvalidOperation,
                "tojson: separators must be two strings",
            ))
        }
        None if indent.is_some() => (",".to_string(), ": ".to_string()),
        None => (", ".to_string(), ": ".to_string()),
    };
    let opts = Options {
        ensure_ascii: kwargs.get::<Option<bool>>("ensure_ascii")?.unwrap_or(false),
        indent,
        item_sep,
        key_sep,
        sort_keys: kwargs.get::<Option<bool>>("sort_keys")?.unwrap_or(false),
    };
    kwargs.assert_all_used()?;
    let mut out = String::new();
    write(&value, &opts, 0, &mut out)?;
    Ok(out)
}

fn newline(opts: &Options, depth: usize, out: &mut String) {
    if let Some(ind) = &opts.indent {
        out.push('\n');
        for _ in 0..depth {
            out.push_str(ind);
        }
    }
}

fn write(v: &Value, opts: &Options, depth: usize, out: &mut String) -> Result<(), Error> {
    match v.kind() {
        ValueKind::Undefined | ValueKind::None => out.push_str("null"),
        ValueKind::Bool => out.push_str(if v.is_true() { "true" } else { "false" }),
        ValueKind::Number => out.push_str(&number(v)),
        ValueKind::String => string(v.as_str().unwrap_or_default(), opts.ensure_ascii, out),
        ValueKind::Seq | ValueKind::Iterable => {
            let items: Vec<Value> = v.try_iter()?.collect();
            container(&items, '[', ']', opts, depth, out, |item, out| {
                write(item, opts, depth + 1, out)
            })?;
        }
        ValueKind::Map => {
            let mut keys: Vec<Value> = v.try_iter()?.collect();
            if opts.sort_keys {
                keys.sort_by_key(|k| k.to_string());
            }
            container(&keys, '{', '}', opts, depth, out, |key, out| {
                let text = match key.as_str() {
                    Some(s) => s.to_string(),
                    None => number_or_literal(key),
                };
                string(&text, opts.ensure_ascii, out);
                out.push_str(&opts.key_sep);
                write(&v.get_item(key)?, opts, depth + 1, out)
            })?;
        }
        _ => {
            return Err(Error::new(
                ErrorKind::InvalidOperation,
                format!("tojson: a {} value is not JSON serializable", v.kind()),
            ))
        }
    }
    Ok(())
}

/// Items between `open` and `close`, separated and indented as Python's `json.dumps` does.
fn container(
    items: &[Value],
    open: char,
    close: char,
    opts: &Options,
    depth: usize,
    out: &mut String,
    mut each: impl FnMut(&Value, &mut String) -> Result<(), Error>,
) -> Result<(), Error> {
    out.push(open);
    if items.is_empty() {
        out.push(close);
        return Ok(());
    }
    for (i, item) in items.iter().enumerate() {
        if i > 0 {
            out.push_str(&opts.item_sep);
        }
        newline(opts, depth + 1, out);
        each(item, out)?;
    }
    newline(opts, depth, out);
    out.push(close);
    Ok(())
}

/// A JSON key from a non-string key: Python writes numbers, `true`/`false`, `null` as text.
fn number_or_literal(v: &Value) -> String {
    match v.kind() {
        ValueKind::None | ValueKind::Undefined => "null".into(),
        ValueKind::Bool => (if v.is_true() { "true" } else { "false" }).into(),
        _ => number(v),
    }
}

/// A number as Python's `repr`: integers plainly, floats with a `.0` when integral.
fn number(v: &Value) -> String {
    if let Some(i) = v.as_i64().filter(|_| v.is_integer()) {
        return i.to_string();
    }
    match f64::try_from(v.clone()) {
        Ok(f) if f.is_nan() => "NaN".into(),
        Ok(f) if f.is_infinite() => (if f > 0.0 { "Infinity" } else { "-Infinity" }).into(),
        Ok(f) if f.fract() == 0.0 && f.abs() < 1e16 => format!("{f:.1}"),
        Ok(f) => format!("{f}"),
        Err(_) => v.to_string(),
    }
}

/// A JSON string literal, escaped as Python's `json.dumps` escapes (`ensure_ascii`: every
/// non-ASCII character as `\uXXXX`, in UTF-16 surrogates beyond the BMP).
fn string(s: &str, ensure_ascii: bool, out: &mut String) {
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            '\u{8}' => out.push_str("\\b"),
            '\u{c}' => out.push_str("\\f"),
            c if (c as u32) < 0x20 || (ensure_ascii && (!c.is_ascii() || c == '\u{7f}')) => {
                let mut buf = [0u16; 2];
                for unit in c.encode_utf16(&mut buf) {
                    out.push_str(&format!("\\u{unit:04x}"));
                }
            }
            c => out.push(c),
        }
    }
    out.push('"');
}
