//! Recipient masking (CONTRACT §5), used wherever a recipient is shown outside its own send
//! request: the activity feed, notification lookups, logs.
//!
//! - Email, local part of n characters: n = 1 → `*`; n = 2 → first character + `*`; n ≥ 3 →
//!   first character, n − 2 asterisks, last character. The domain is kept.
//! - Phone (`+` and digits): `+`, the first 2 digits, asterisks, the last 2 digits.
//! - Anything else (user ids): masked like an email local part.

/// Masks `recipient` by the rule for its shape.
pub fn mask(recipient: &str) -> String {
    if let Some((local, domain)) = recipient.rsplit_once('@') {
        return format!("{}@{domain}", mask_local(local));
    }
    if let Some(digits) =
        recipient.strip_prefix('+').filter(|d| !d.is_empty() && d.bytes().all(|b| b.is_ascii_digit()))
    {
        if digits.len() <= 4 {
            return format!("+{}", "*".repeat(digits.len()));
        }
        return format!("+{}{}{}", &digits[..2], "*".repeat(digits.len() - 4), &digits[digits.len() - 2..]);
    }
    mask_local(recipient)
}

fn mask_local(local: &str) -> String {
    let chars: Vec<char> = local.chars().collect();
    match chars.len() {
        0 => String::new(),
        1 => "*".to_owned(),
        2 => format!("{}*", chars[0]),
        n => format!("{}{}{}", chars[0], "*".repeat(n - 2), chars[n - 1]),
    }
}

#[cfg(test)]
mod tests {
    use super::mask;

    #[test]
    fn emails_by_local_part_length() {
        assert_eq!(mask("a@example.com"), "*@example.com");
        assert_eq!(mask("ab@example.com"), "a*@example.com");
        assert_eq!(mask("abc@example.com"), "a*c@example.com");
        assert_eq!(mask("alice.smith@example.com"), "a*********h@example.com");
        assert_eq!(mask("élan@exämple.com"), "é**n@exämple.com");
    }

    #[test]
    fn phones_keep_two_digits_each_side() {
        assert_eq!(mask("+14155550100"), "+14*******00");
        assert_eq!(mask("+4930123"), "+49***23");
        assert_eq!(mask("+123"), "+***");
    }

    #[test]
    fn user_ids_like_a_local_part() {
        assert_eq!(mask("u"), "*");
        assert_eq!(mask("u1"), "u*");
        assert_eq!(mask("user-42"), "u*****2");
    }
}
