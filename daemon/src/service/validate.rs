//! Field rules shared by the endpoints. Each returns the message for a `FieldError`.

/// An email address within RFC 5321 limits (local part ≤ 64, domain ≤ 253, whole ≤ 254) that
/// lettre, which sends it, accepts.
pub fn email_address(value: &str) -> Result<(), &'static str> {
    let Some((local, domain)) = value.rsplit_once('@') else {
        return Err("must be an email address");
    };
    if value.len() > 254 || local.is_empty() || local.len() > 64 || domain.is_empty() || domain.len() > 253 {
        return Err(
            "must be an email address within RFC 5321 limits (local part ≤ 64, whole ≤ 254 characters)",
        );
    }
    if !domain.contains('.') && domain != "localhost" {
        return Err("must be an email address with a fully qualified domain");
    }
    value.parse::<lettre::Address>().map(|_| ()).map_err(|_| "must be an email address")
}

/// An E.164 phone number: `+`, then 7 to 15 digits, the first not 0.
pub fn e164(value: &str) -> Result<(), &'static str> {
    let digits = value.strip_prefix('+').ok_or("must be an E.164 phone number starting with +")?;
    if !(7..=15).contains(&digits.len())
        || !digits.bytes().all(|b| b.is_ascii_digit())
        || digits.starts_with('0')
    {
        return Err("must be an E.164 phone number: + and 7 to 15 digits, the first not 0");
    }
    Ok(())
}

/// An absolute `http` or `https` URL (never `javascript:` or `data:`).
pub fn http_url(value: &str) -> Result<(), &'static str> {
    let lower = value.to_ascii_lowercase();
    let rest = lower.strip_prefix("https://").or_else(|| lower.strip_prefix("http://"));
    match rest {
        Some(rest)
            if !rest.is_empty()
                && !rest.starts_with('/')
                && !value.chars().any(|c| c.is_whitespace() || c.is_control()) =>
        {
            if value.len() > 2048 {
                Err("must be at most 2048 characters")
            } else {
                Ok(())
            }
        }
        _ => Err("must be an http:// or https:// URL"),
    }
}

/// Text that must fit on one header line: no line breaks or control characters.
pub fn single_line(value: &str, max_chars: usize) -> Result<(), String> {
    if value.chars().any(|c| c.is_control()) {
        return Err("must not contain line breaks or control characters".to_owned());
    }
    if value.chars().count() > max_chars {
        return Err(format!("must be at most {max_chars} characters"));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn email_addresses() {
        assert!(email_address("a@example.com").is_ok());
        assert!(email_address("first.last+tag@sub.example.co").is_ok());
        assert!(email_address("root@localhost").is_ok());
        for bad in ["", "a", "@example.com", "a@", "a b@example.com", "a@example", "a@@example.com"] {
            assert!(email_address(bad).is_err(), "{bad}");
        }
        assert!(email_address(&format!("{}@example.com", "a".repeat(65))).is_err(), "local part > 64");
        assert!(email_address(&format!("a@{}.com", "b".repeat(250))).is_err(), "whole > 254");
    }

    #[test]
    fn phone_numbers() {
        assert!(e164("+14155550100").is_ok());
        assert!(e164("+491701234567").is_ok());
        for bad in ["14155550100", "+", "+0123456789", "+1415555010a", "+1234567890123456", "+12345"] {
            assert!(e164(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn urls() {
        assert!(http_url("https://example.com/a?b=c").is_ok());
        assert!(http_url("HTTP://EXAMPLE.COM").is_ok());
        for bad in
            ["javascript:alert(1)", "data:text/html,x", "https://", "//example.com", "ftp://x", "https://a b"]
        {
            assert!(http_url(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn header_lines() {
        assert!(single_line("Hello", 10).is_ok());
        assert!(single_line("Hello\r\nBcc: x@y.z", 100).is_err());
        assert!(single_line("Hello", 3).is_err());
    }
}
