//! Bounds on the template calls whose argument is a size: `indent(width)`, `format` / `.format()`
//! widths and precisions, `tojson(indent=...)`. Fuel bounds the steps a template runs and the
//! output limit what it writes, but one of these calls allocates its argument's size in one
//! step: `indent(1099511627776)` asked for 1 TB (an abort), `"%.99999999999f" | format(1.0)`
//! panicked inside minijinja. No template of tests/chat_templates.rs uses a size over 8.
use minijinja::value::{from_args, Kwargs, Rest, StringInput, Value};
use minijinja::{Error, ErrorKind, State};

/// The largest indent, width or precision a template may ask for.
pub const MAX_WIDTH: usize = 4096;

/// Errors: `n` over [`MAX_WIDTH`]; `what` names the call.
pub fn check_width(what: &str, n: u64) -> Result<(), Error> {
    if n > MAX_WIDTH as u64 {
        return Err(Error::new(
            ErrorKind::InvalidOperation,
            format!("{what} of {n}: over the limit of {MAX_WIDTH}"),
        ));
    }
    Ok(())
}

/// Errors: a run of digits in format string `s` (a width, a precision or an argument index)
/// over [`MAX_WIDTH`].
fn check_format_string(s: &str) -> Result<(), Error> {
    for run in s
        .split(|c: char| !c.is_ascii_digit())
        .filter(|r| !r.is_empty())
    {
        let n = run.parse::<u64>().unwrap_or(u64::MAX);
        check_width("a width or precision in a format string", n)?;
    }
    Ok(())
}

/// The `indent` filter (`indent(width=4, first=false, blank=false)`), its width checked
/// first.
pub fn indent(
    state: &State,
    value: Value,
    args: Rest<Value>,
    kwargs: Kwargs,
) -> Result<Value, Error> {
    let (width, first, blank): (Option<usize>, Option<bool>, Option<bool>) = from_args(&args)?;
    // Positional or keyword (minijinja reads the keyword itself).
    if let Some(w) = width.or(kwargs.peek::<Option<usize>>("width")?) {
        check_width("indent", w as u64)?;
    }
    let input = StringInput::new(state, &value)?;
    minijinja::filters::indent(input, width, first, blank, kwargs)
}

/// The `format` filter (printf style), its format string checked first.
pub fn format(state: &State, format_str: &Value, args: Rest<Value>) -> Result<Value, Error> {
    if let Some(s) = format_str.as_str() {
        check_format_string(s)?;
    }
    minijinja::filters::format(state, format_str, args)
}

/// minijinja-contrib's Python methods, with `str.format`'s format string checked first.
pub fn unknown_method(
    state: &State,
    value: &Value,
    method: &str,
    args: &[Value],
) -> Result<Value, Error> {
    if method == "format" {
        if let Some(s) = value.as_str() {
            check_format_string(s)?;
        }
    }
    minijinja_contrib::pycompat::unknown_method_callback(state, value, method, args)
}
