//! Just enough JSON to print one result object: a string escaper and a
//! writer for flat values. Hand-written so the tool stays dependency-free
//! beyond the core; the escaper is the only part that can be wrong, so it
//! is the part that is tested.

use std::fmt::Write;

/// Appends `s` as a JSON string literal. Output stays UTF-8 (non-ASCII is
/// written as is); only what RFC 8259 requires is escaped.
pub fn push_str(out: &mut String, s: &str) {
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
            c if c < ' ' => {
                let _ = write!(out, "\\u{:04x}", c as u32);
            }
            c => out.push(c),
        }
    }
    out.push('"');
}

pub trait Json {
    fn write(&self, out: &mut String);
}

impl Json for str {
    fn write(&self, out: &mut String) {
        push_str(out, self);
    }
}

impl Json for String {
    fn write(&self, out: &mut String) {
        push_str(out, self);
    }
}

impl Json for bool {
    fn write(&self, out: &mut String) {
        out.push_str(if *self { "true" } else { "false" });
    }
}

macro_rules! json_number {
    ($($t:ty),*) => {$(
        impl Json for $t {
            fn write(&self, out: &mut String) {
                let _ = write!(out, "{self}");
            }
        }
    )*};
}
json_number!(i32, u64, u32);

impl<T: Json + ?Sized> Json for &T {
    fn write(&self, out: &mut String) {
        (**self).write(out);
    }
}

impl<T: Json> Json for Option<T> {
    fn write(&self, out: &mut String) {
        match self {
            Some(v) => v.write(out),
            None => out.push_str("null"),
        }
    }
}

/// An object under construction: `Object::new().field("a", 1).finish()`.
pub struct Object(String);

impl Default for Object {
    fn default() -> Self {
        Object(String::from("{"))
    }
}

impl Object {
    pub fn new() -> Self {
        Object::default()
    }

    pub fn field(mut self, key: &str, value: impl Json) -> Self {
        if self.0.len() > 1 {
            self.0.push(',');
        }
        push_str(&mut self.0, key);
        self.0.push(':');
        value.write(&mut self.0);
        self
    }

    pub fn finish(mut self) -> String {
        self.0.push('}');
        self.0
    }
}

impl Json for Object {
    fn write(&self, out: &mut String) {
        out.push_str(&self.0);
        out.push('}');
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn esc(s: &str) -> String {
        let mut out = String::new();
        push_str(&mut out, s);
        out
    }

    #[test]
    fn escapes_quotes_and_backslashes() {
        assert_eq!(esc(r#"say "hi" \o/"#), r#""say \"hi\" \\o/""#);
        assert_eq!(esc(""), r#""""#);
    }

    #[test]
    fn escapes_every_control_character() {
        assert_eq!(esc("a\nb\rc\td"), r#""a\nb\rc\td""#);
        assert_eq!(esc("\u{8}\u{c}"), r#""\b\f""#);
        assert_eq!(esc("\0\u{1}\u{1b}[0m\u{1f}"), r#""\u0000\u0001\u001b[0m\u001f""#);
        for c in (0u32..0x20).filter_map(char::from_u32) {
            let e = esc(&c.to_string());
            assert!(e.chars().all(|c| c >= ' '), "{c:?} escaped as {e}");
        }
    }

    #[test]
    fn keeps_non_ascii_as_utf8() {
        assert_eq!(esc("é€😀 \u{7f} \u{2028}"), "\"é€😀 \u{7f} \u{2028}\"");
    }

    #[test]
    fn objects_nest_and_print_null() {
        let inner = Object::new().field("text", "x\"y").field("n", None::<u64>);
        let json = Object::new()
            .field("a", 1i32)
            .field("b", true)
            .field("o", inner)
            .field("e", Object::new())
            .finish();
        assert_eq!(json, r#"{"a":1,"b":true,"o":{"text":"x\"y","n":null},"e":{}}"#);
    }
}
