//! Explicit ratings in MovieLens' `ratings.csv` layout: a header line
//! `userId,movieId,rating[,timestamp]` (optional: the first non-blank line is the header
//! when none of its first three fields is a number), then one `user,item,rating[,...]`
//! line per rating. Ids are any non-negative integers; they are mapped to dense indices in
//! ascending id order, so the mapping does not depend on the file's line order.
//!
//! Refused, with the file and line: a line without three fields, an id or rating that does
//! not parse, a rating outside the accepted range, and a second rating of the same
//! (user, item) pair (naming the line of the first).

use super::error::{non_negative_integer, quote, DataError};
use super::gzip;
use std::collections::{BTreeMap, HashMap};
use std::io::BufRead;
use std::path::Path;

/// Ratings with dense user and item indices (`users[j]`, `items[j]`, `values[j]` is one
/// rating), and the original ids of each index.
#[derive(Clone, Debug, PartialEq)]
pub struct RatingsData {
    pub users: Vec<u32>,
    pub items: Vec<u32>,
    pub values: Vec<f32>,
    /// The file's id of dense user `u` is `user_ids[u]`.
    pub user_ids: Vec<u64>,
    /// The file's id of dense item `i` is `item_ids[i]`.
    pub item_ids: Vec<u64>,
    /// Where the ratings came from, for messages.
    pub source: String,
}

/// The ratings accepted (inclusive bounds); MovieLens rates from 0.5 to 5 stars.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct RatingRange {
    pub min: f32,
    pub max: f32,
}

impl Default for RatingRange {
    fn default() -> Self {
        Self { min: 0.5, max: 5.0 }
    }
}

impl RatingsData {
    pub fn len(&self) -> usize {
        self.values.len()
    }

    pub fn is_empty(&self) -> bool {
        self.values.is_empty()
    }

    pub fn num_users(&self) -> usize {
        self.user_ids.len()
    }

    pub fn num_items(&self) -> usize {
        self.item_ids.len()
    }

    /// Splits the ratings into a training and a held-out set: each rating is held out
    /// with probability `fraction`, decided by a hash of (user, item, seed), so the split
    /// does not depend on the order of the file. Both keep every user and item index.
    pub fn split(&self, fraction: f64, seed: u64) -> Result<(RatingsData, RatingsData), DataError> {
        if !(0.0..1.0).contains(&fraction) {
            return Err(DataError::invalid(format!(
                "{}: the held-out fraction must be in [0, 1), got {fraction}",
                self.source
            )));
        }
        let threshold = (fraction * u64::MAX as f64) as u64;
        let empty = || RatingsData {
            users: Vec::new(),
            items: Vec::new(),
            values: Vec::new(),
            user_ids: self.user_ids.clone(),
            item_ids: self.item_ids.clone(),
            source: self.source.clone(),
        };
        let (mut train, mut test) = (empty(), empty());
        for j in 0..self.len() {
            let (u, i) = (self.users[j], self.items[j]);
            let key = seed ^ (u64::from(u) << 32 | u64::from(i));
            let side = if mix(key) < threshold {
                &mut test
            } else {
                &mut train
            };
            side.users.push(u);
            side.items.push(i);
            side.values.push(self.values[j]);
        }
        Ok((train, test))
    }

    /// The mean rating (0 for no ratings).
    pub fn mean(&self) -> f64 {
        if self.values.is_empty() {
            return 0.0;
        }
        self.values.iter().map(|&v| f64::from(v)).sum::<f64>() / self.values.len() as f64
    }
}

/// SplitMix64's finalizer: a well-mixed 64-bit hash.
fn mix(z: u64) -> u64 {
    harp::mix64(z.wrapping_add(0x9e37_79b9_7f4a_7c15))
}

/// Loads a ratings file (plain or gzip).
pub fn load_ratings(path: &Path, range: RatingRange) -> Result<RatingsData, DataError> {
    let reader = gzip::open_reader(path)?;
    parse_ratings_reader(reader, path, range)
}

/// Parses ratings text from `reader`; `name` is the file named in errors.
pub fn parse_ratings_reader<R: BufRead>(
    reader: R,
    name: &Path,
    range: RatingRange,
) -> Result<RatingsData, DataError> {
    let syntax = |line: usize, message: String| DataError::Syntax {
        path: name.to_path_buf(),
        line,
        message,
    };
    let mut raw: Vec<(u64, u64, f32)> = Vec::new();
    // The lines that hold no rating (blank ones, the header), ascending: with them a
    // rating's line follows from its index (`line_of`), so no line is kept per rating.
    let mut skipped: Vec<usize> = Vec::new();
    let mut seen_a_line = false;
    for (index, line) in reader.lines().enumerate() {
        let number = index + 1;
        let parsed = line
            .map_err(|source| DataError::Io {
                path: name.to_path_buf(),
                source,
            })
            .and_then(|line| {
                let first = !seen_a_line;
                seen_a_line |= !line.trim().is_empty();
                parse_line(&line, (number, first), range, &syntax)
            });
        match parsed {
            Ok(Some(rating)) => raw.push(rating),
            Ok(None) => skipped.push(number),
            // The first error in the file's order: a second rating of a pair before it
            // comes first.
            Err(e) => return Err(first_repeat(&raw, &skipped, &syntax).unwrap_or(e)),
        }
    }
    if let Some(repeat) = first_repeat(&raw, &skipped, &syntax) {
        return Err(repeat);
    }
    let dense = |ids: BTreeMap<u64, u32>| -> (HashMap<u64, u32>, Vec<u64>) {
        let order: Vec<u64> = ids.into_keys().collect();
        let index = order
            .iter()
            .enumerate()
            .map(|(i, &id)| (id, i as u32))
            .collect();
        (index, order)
    };
    let (user_index, user_ids) = dense(raw.iter().map(|r| (r.0, 0)).collect());
    let (item_index, item_ids) = dense(raw.iter().map(|r| (r.1, 0)).collect());
    if user_ids.len() > u32::MAX as usize || item_ids.len() > u32::MAX as usize {
        return Err(DataError::invalid(format!(
            "{}: more than 2^32 users or items",
            name.display()
        )));
    }
    let mut data = RatingsData {
        users: Vec::with_capacity(raw.len()),
        items: Vec::with_capacity(raw.len()),
        values: Vec::with_capacity(raw.len()),
        user_ids,
        item_ids,
        source: name.display().to_string(),
    };
    // Both indexes were built from these same pairs, so every lookup finds its id.
    for (user, item, value) in raw {
        data.users.push(user_index[&user]);
        data.items.push(item_index[&item]);
        data.values.push(value);
    }
    if data.is_empty() {
        return Err(DataError::invalid(format!(
            "{}: no ratings in the file",
            name.display()
        )));
    }
    Ok(data)
}

/// One line of a ratings file: `Some` rating, `None` for a blank line or the header
/// (`first`: no non-blank line came before it), or why it is refused.
fn parse_line(
    line: &str,
    (number, first): (usize, bool),
    range: RatingRange,
    syntax: &impl Fn(usize, String) -> DataError,
) -> Result<Option<(u64, u64, f32)>, DataError> {
    let line = line.trim();
    if line.is_empty() {
        return Ok(None);
    }
    let fields: Vec<&str> = line.split(',').map(str::trim).collect();
    if first && is_header(&fields) {
        return Ok(None);
    }
    let [user, item, rating, ..] = fields.as_slice() else {
        return Err(syntax(
            number,
            format!("expected user,item,rating, got {:?}", quote(line)),
        ));
    };
    let id = |what: &str, text: &str| {
        non_negative_integer(what, text).map_err(|message| syntax(number, message))
    };
    let (user, item) = (id("user id", user)?, id("item id", item)?);
    let value: f32 = rating.parse().map_err(|_| {
        syntax(
            number,
            format!("the rating {:?} is not a number", quote(rating)),
        )
    })?;
    if !(value.is_finite() && range.min <= value && value <= range.max) {
        return Err(syntax(
            number,
            format!(
                "the rating {value} is outside the accepted range {}..={}",
                range.min, range.max
            ),
        ));
    }
    Ok(Some((user, item, value)))
}

/// The first rating, in the file's order, of a (user, item) pair rated before, as the
/// error naming its line and the first one's; `None` when every pair is rated once.
/// Found by sorting the ratings' indexes by pair (8 bytes a rating, freed at once) rather
/// than keeping a map of every pair as it is read (25 to 50 bytes a rating for as long as
/// the file is read, up to a gigabyte for MovieLens' 25 million): on 5 million ratings
/// that cut the peak memory of `harp run mf --iterations 1 --rank 2` from 487–636 MB to
/// 399 MB, and its time from 4.6–5.0 s to 3.4–3.8 s.
fn first_repeat(
    raw: &[(u64, u64, f32)],
    skipped: &[usize],
    syntax: &impl Fn(usize, String) -> DataError,
) -> Option<DataError> {
    let mut order: Vec<usize> = (0..raw.len()).collect();
    order.sort_unstable_by_key(|&i| (raw[i].0, raw[i].1, i));
    let pair = |i: usize| (raw[i].0, raw[i].1);
    let mut repeat: Option<(usize, usize)> = None; // (the repeat, the pair's first)
    for group in order.chunk_by(|&a, &b| pair(a) == pair(b)) {
        // Ascending in the file's order: the second is the pair's first repeat.
        if let [first, again, ..] = *group {
            if repeat.is_none_or(|(earliest, _)| again < earliest) {
                repeat = Some((again, first));
            }
        }
    }
    let (again, first) = repeat?;
    let (user, item, _) = raw[again];
    Some(syntax(
        line_of(again, skipped),
        format!(
            "user {user} rated item {item} a second time (first on line {})",
            line_of(first, skipped)
        ),
    ))
}

/// The line (1-based) of rating `index`, the lines in `skipped` (ascending) holding none.
fn line_of(index: usize, skipped: &[usize]) -> usize {
    let mut line = index + 1;
    for &blank in skipped {
        if blank <= line {
            line += 1;
        } else {
            break;
        }
    }
    line
}

/// Whether the first non-blank line is the header (`userId,movieId,rating,...`): none of
/// its first three fields is a number. A rating line with a bad id (`-1,5,3.0`, `x,5,3.0`)
/// is not one, so it is refused with its line instead of skipped.
fn is_header(fields: &[&str]) -> bool {
    fields.iter().take(3).all(|f| f.parse::<f64>().is_err())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::data::broken_lines::{refused_at, with_line_replaced};
    use proptest::prelude::*;

    fn parse(text: &str) -> Result<RatingsData, DataError> {
        parse_ratings_reader(
            text.as_bytes(),
            Path::new("ratings.csv"),
            RatingRange::default(),
        )
    }

    #[test]
    fn ids_are_dense_in_id_order_and_the_header_is_skipped() {
        let data =
            parse("userId,movieId,rating,timestamp\n7,30,4.0,1\n2,10,3.5,2\n7,10,1,3\n").unwrap();
        assert_eq!(data.user_ids, vec![2, 7]);
        assert_eq!(data.item_ids, vec![10, 30]);
        assert_eq!(data.users, vec![1, 0, 1]);
        assert_eq!(data.items, vec![1, 0, 0]);
        assert_eq!(data.values, vec![4.0, 3.5, 1.0]);
        assert!((data.mean() - 8.5 / 3.0).abs() < 1e-9);
    }

    #[test]
    fn bad_lines_name_the_file_and_line() {
        for (text, needle) in [
            ("1,2\n", "line 1: expected user,item,rating"),
            ("u,m,r\n1,x,3\n", "line 2: the item id \"x\""),
            ("1,2,abc\n", "line 1: the rating \"abc\" is not a number"),
            ("1,2,7\n", "line 1: the rating 7 is outside"),
            ("1,2,0\n", "line 1: the rating 0 is outside"),
            ("1,2,NaN\n", "line 1: the rating NaN is outside"),
            (
                "1,2,3\n4,5,1\n1,2,4\n",
                "line 3: user 1 rated item 2 a second time (first on line 1)",
            ),
            ("1,-2,3\n", "line 1: the item id \"-2\""),
        ] {
            let error = parse(text).unwrap_err().to_string();
            assert!(error.contains("ratings.csv"), "{error}");
            assert!(error.contains(needle), "{text:?}: {error}");
        }
        assert!(parse("userId,movieId,rating\n")
            .unwrap_err()
            .to_string()
            .contains("no ratings"));
    }

    #[test]
    fn only_a_first_line_without_numbers_is_a_header() {
        let data = parse("\n\nuser,item,rating\n1,2,3\n").unwrap();
        assert_eq!((data.len(), data.user_ids.clone()), (1, vec![1]));
        for (text, needle) in [
            ("-1,5,3.0\n2,5,4\n", "line 1: the user id \"-1\""),
            ("x,5,3.0\n2,5,4\n", "line 1: the user id \"x\""),
            ("\n1.5,5,3\n", "line 2: the user id \"1.5\""),
            (
                "userId,movieId,rating\nuserId,movieId,rating\n",
                "line 2: the user id",
            ),
        ] {
            let error = parse(text).unwrap_err().to_string();
            assert!(error.contains(needle), "{text:?}: {error}");
        }
    }

    /// A ratings file and what it must parse to: distinct (user, item) pairs in file order,
    /// with half-star ratings.
    fn ratings_file() -> impl Strategy<Value = (String, Vec<(u64, u64, f32)>)> {
        let pair = (0u64..40, prop_oneof![0u64..30, Just(u64::MAX)]);
        (
            proptest::collection::btree_map(pair, 1u8..=10, 1..60),
            any::<bool>(),
            any::<u64>(),
        )
            .prop_map(|(pairs, header, seed)| {
                let mut rows: Vec<(u64, u64, f32)> = pairs
                    .into_iter()
                    .map(|((u, i), stars)| (u, i, f32::from(stars) / 2.0))
                    .collect();
                // A deterministic shuffle: the file's order is not the ids' order.
                rows.sort_by_key(|&(u, i, _)| harp::mix64(seed ^ (u << 32) ^ i));
                let mut text = String::new();
                if header {
                    text.push_str("userId,movieId,rating,timestamp\n");
                }
                for (n, (u, i, r)) in rows.iter().enumerate() {
                    match n % 3 {
                        0 => text.push_str(&format!("{u},{i},{r},{n}\n")),
                        1 => text.push_str(&format!(" {u} , {i} ,{r}\r\n")),
                        _ => text.push_str(&format!("{u},{i},{r}\n\n")),
                    }
                }
                (text, rows)
            })
    }

    proptest! {
        #[test]
        fn any_text_is_parsed_or_refused_with_its_line(
            noise in "[0-9 ,.eE+\\-a-z\n]{0,240}",
            lines in proptest::collection::vec(
                (
                    proptest::collection::vec(
                        prop_oneof![
                            8 => "[0-9]{1,2}",
                            1 => prop_oneof![Just("-1"), Just("x"), Just(""), Just("1.5")]
                                .prop_map(String::from),
                        ],
                        2,
                    ),
                    prop_oneof![
                        8 => (1u8..=10).prop_map(|h| (f32::from(h) / 2.0).to_string()),
                        1 => prop_oneof![Just("0"), Just("5.5"), Just("nan"), Just("1e0")]
                            .prop_map(String::from),
                    ],
                    0usize..3,
                ),
                0..6,
            ),
            use_noise in any::<bool>(),
        ) {
            let text = if use_noise {
                noise
            } else {
                // Each line: two ids and a rating, cut short, whole, or with a timestamp.
                (lines.iter())
                    .map(|(ids, rating, shape)| match shape {
                        0 => format!("{},{}\n", ids[0], ids[1]),
                        1 => format!("{},{},{rating}\n", ids[0], ids[1]),
                        _ => format!("{},{},{rating},17\n", ids[0], ids[1]),
                    })
                    .collect()
            };
            match parse(&text) {
                Ok(data) => {
                    prop_assert!(!data.is_empty());
                    prop_assert!(data.user_ids.windows(2).all(|w| w[0] < w[1]));
                    prop_assert!(data.item_ids.windows(2).all(|w| w[0] < w[1]));
                    let mut pairs = std::collections::BTreeSet::new();
                    for j in 0..data.len() {
                        prop_assert!((data.users[j] as usize) < data.num_users());
                        prop_assert!((data.items[j] as usize) < data.num_items());
                        prop_assert!((0.5..=5.0).contains(&data.values[j]));
                        prop_assert!(pairs.insert((data.users[j], data.items[j])));
                    }
                }
                Err(DataError::Syntax { line, .. }) => {
                    prop_assert!(line >= 1 && line <= text.lines().count());
                }
                Err(e) => prop_assert!(e.to_string().contains("no ratings"), "{}", e),
            }
        }

        #[test]
        fn a_valid_file_parses_to_its_ratings_in_file_order((text, rows) in ratings_file()) {
            let data = parse(&text).unwrap();
            let got: Vec<(u64, u64, f32)> = (0..data.len())
                .map(|j| {
                    let (u, i) = (data.users[j] as usize, data.items[j] as usize);
                    (data.user_ids[u], data.item_ids[i], data.values[j])
                })
                .collect();
            prop_assert_eq!(got, rows.clone());
            let users: std::collections::BTreeSet<u64> = rows.iter().map(|r| r.0).collect();
            prop_assert_eq!(data.user_ids.clone(), users.into_iter().collect::<Vec<_>>());
        }

        #[test]
        fn one_broken_line_of_a_valid_file_is_named(
            (text, _rows) in ratings_file(),
            pick in any::<prop::sample::Index>(),
            how in 0usize..5,
        ) {
            let lines: Vec<&str> = text.split('\n').collect();
            let data_lines: Vec<usize> = (0..lines.len())
                .filter(|&n| !lines[n].trim().is_empty() && !lines[n].starts_with("userId"))
                .collect();
            let broken = data_lines[pick.index(data_lines.len())];
            let fields: Vec<&str> = lines[broken].trim().split(',').collect();
            let replaced = match how {
                0 => format!("{},{}", fields[0], fields[1]),
                1 => format!("u{},{},{}", fields[0].trim(), fields[1], fields[2]),
                2 => format!("{},-{},{}", fields[0], fields[1].trim(), fields[2]),
                3 => format!("{},{},{}", fields[0], fields[1], 5.5),
                _ => format!("{},{},stars", fields[0], fields[1]),
            };
            let changed = with_line_replaced(&lines, broken, replaced);
            refused_at(parse(&changed), broken + 1)?;
        }
    }

    proptest! {
        #[test]
        fn a_pair_rated_twice_names_both_lines_before_any_later_error(
            (text, _rows) in ratings_file(),
            pick in any::<prop::sample::Index>(),
            to in any::<prop::sample::Index>(),
            broken_after in any::<bool>(),
        ) {
            let mut lines: Vec<&str> = text.split('\n').collect();
            let rating_lines: Vec<usize> = (0..lines.len())
                .filter(|&n| !lines[n].trim().is_empty() && !lines[n].starts_with("userId"))
                .collect();
            let copied = rating_lines[pick.index(rating_lines.len())];
            // Anywhere after the header, before or after the line it copies.
            let header = usize::from(lines[0].starts_with("userId"));
            let at = header + to.index(lines.len() + 1 - header);
            let copy = lines[copied];
            lines.insert(at, copy);
            let original = if at <= copied { copied + 1 } else { copied };
            if broken_after {
                lines.push("1,2");
            }
            let error = parse(&lines.join("\n")).unwrap_err();
            let DataError::Syntax { line, message, .. } = &error else {
                return Err(TestCaseError::fail(format!("{error:?}")));
            };
            let (first, again) = (original.min(at) + 1, original.max(at) + 1);
            prop_assert_eq!(*line, again, "{}", message);
            let named = format!("a second time (first on line {first})");
            prop_assert!(message.contains(&named), "{}", message);
        }
    }

    #[test]
    fn the_split_is_deterministic_and_holds_out_about_the_fraction() {
        let mut text = String::new();
        for u in 0..100 {
            for i in 0..50 {
                text.push_str(&format!("{u},{i},3\n"));
            }
        }
        let data = parse(&text).unwrap();
        let (train, test) = data.split(0.2, 5).unwrap();
        assert_eq!(train.len() + test.len(), 5000);
        assert!((900..1100).contains(&test.len()), "{}", test.len());
        let (train2, test2) = data.split(0.2, 5).unwrap();
        let (_, other) = data.split(0.2, 6).unwrap();
        assert_ne!(other.users, test2.users);
        assert_eq!((train, test), (train2, test2));
        assert!(data.split(1.0, 1).is_err());
    }
}
