//! `strftime_now(format)` for chat templates: the current UTC date and time formatted with
//! C/Python `strftime` directives (transformers passes Python's `datetime.now().strftime`;
//! Llama 3.2's template prints `strftime_now("%d %b %Y")`, SmolLM3's `"%d %B %Y"`).

const MONTHS: [&str; 12] = [
    "January",
    "February",
    "March",
    "April",
    "May",
    "June",
    "July",
    "August",
    "September",
    "October",
    "November",
    "December",
];
const WEEKDAYS: [&str; 7] = [
    "Sunday",
    "Monday",
    "Tuesday",
    "Wednesday",
    "Thursday",
    "Friday",
    "Saturday",
];

/// A UTC calendar date and time.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DateTime {
    /// Year (proleptic Gregorian).
    pub year: i64,
    /// Month, 1–12.
    pub month: u32,
    /// Day of the month, 1–31.
    pub day: u32,
    /// Hours, minutes, seconds.
    pub hms: (u32, u32, u32),
    /// Day of the week, 0 = Sunday.
    pub weekday: u32,
    /// Day of the year, 1–366.
    pub yday: u32,
}

fn is_leap(y: i64) -> bool {
    (y % 4 == 0 && y % 100 != 0) || y % 400 == 0
}

impl DateTime {
    /// The UTC date and time `secs` seconds after 1970-01-01T00:00:00Z (negative: before).
    pub fn from_unix(secs: i64) -> DateTime {
        let days = secs.div_euclid(86_400);
        let rem = secs.rem_euclid(86_400) as u32;
        // Walk 400-year cycles (146,097 days each) from 2000-03-01, a cycle start whose
        // years begin in March so that leap days fall at the end of a year.
        let z = days - 11_017; // days from 2000-03-01
        let era = z.div_euclid(146_097);
        let doe = z.rem_euclid(146_097); // day of era, 0..146096
        let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365; // year of era
        let doy = doe - (365 * yoe + yoe / 4 - yoe / 100); // day of March-based year
        let mp = (5 * doy + 2) / 153; // month from March = 0
        let day = (doy - (153 * mp + 2) / 5 + 1) as u32;
        let month = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
        let year = 2000 + era * 400 + yoe + i64::from(month <= 2);
        let cumulative = [0, 31, 59, 90, 120, 151, 181, 212, 243, 273, 304, 334];
        let yday = cumulative[month as usize - 1] + day + u32::from(month > 2 && is_leap(year));
        DateTime {
            year,
            month,
            day,
            hms: (rem / 3600, rem / 60 % 60, rem % 60),
            // 1970-01-01 was a Thursday (4).
            weekday: (days + 4).rem_euclid(7) as u32,
            yday,
        }
    }

    /// `format` with `%Y %y %m %d %e %j %H %I %M %S %p %b %h %B %a %A %%` replaced (and the
    /// glibc `%-d`, `%-m`, `%-H`, `%-I`, `%-M`, `%-S`, `%-j` without padding); any other
    /// directive is kept as written.
    pub fn format(&self, format: &str) -> String {
        let (h, m, s) = self.hms;
        let h12 = if h % 12 == 0 { 12 } else { h % 12 };
        let month = MONTHS[self.month as usize - 1];
        let weekday = WEEKDAYS[self.weekday as usize];
        let mut out = String::new();
        let mut chars = format.chars();
        while let Some(c) = chars.next() {
            if c != '%' {
                out.push(c);
                continue;
            }
            let (pad, d) = match chars.next() {
                Some('-') => (false, chars.next()),
                d => (true, d),
            };
            let num = |n: u32, width: usize| {
                if pad {
                    format!("{n:0width$}")
                } else {
                    n.to_string()
                }
            };
            let piece = match d {
                Some('Y') => self.year.to_string(),
                Some('y') => format!("{:02}", self.year.rem_euclid(100)),
                Some('m') => num(self.month, 2),
                Some('d') => num(self.day, 2),
                Some('e') => format!("{:>2}", self.day),
                Some('j') => num(self.yday, 3),
                Some('H') => num(h, 2),
                Some('I') => num(h12, 2),
                Some('M') => num(m, 2),
                Some('S') => num(s, 2),
                Some('p') => (if h < 12 { "AM" } else { "PM" }).to_string(),
                Some('b') | Some('h') => month[..3].to_string(),
                Some('B') => month.to_string(),
                Some('a') => weekday[..3].to_string(),
                Some('A') => weekday.to_string(),
                Some('%') => "%".to_string(),
                Some(other) => format!("%{}{other}", if pad { "" } else { "-" }),
                None => "%".to_string(),
            };
            out.push_str(&piece);
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Reference values: Python `datetime.fromtimestamp(t, timezone.utc).strftime(...)`.
    #[test]
    fn known_dates() {
        let d = DateTime::from_unix(0);
        assert_eq!(
            d.format("%Y-%m-%d %H:%M:%S %A %j"),
            "1970-01-01 00:00:00 Thursday 001"
        );
        // 2025-03-09T14:05:06Z, the chat-template fixtures' pinned time.
        let d = DateTime::from_unix(1_741_529_106);
        assert_eq!(d.format("%d %b %Y"), "09 Mar 2025");
        assert_eq!(
            d.format("%d %B %Y, %a %I:%M %p, %-d/%-m, day %j"),
            "09 March 2025, Sun 02:05 PM, 9/3, day 068"
        );
        // A leap day and the day after.
        assert_eq!(
            DateTime::from_unix(951_782_400).format("%Y-%m-%d %j"),
            "2000-02-29 060"
        );
        assert_eq!(
            DateTime::from_unix(951_868_800).format("%Y-%m-%d %A"),
            "2000-03-01 Wednesday"
        );
        assert_eq!(
            DateTime::from_unix(-86_400).format("%Y-%m-%d"),
            "1969-12-31"
        );
        assert_eq!(
            DateTime::from_unix(4_107_542_399).format("%Y-%m-%d %H:%M:%S %j"),
            "2100-02-28 23:59:59 059"
        );
    }
}
