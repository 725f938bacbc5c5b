//! LDA (`harp run lda`): on the newsgroups subset the log likelihood per token rises and
//! levels off; the same seed and executor count give the same run on any number of
//! workers (and across node processes); other executor counts reach a comparable value;
//! the word–topic table equals the executors' token assignments after the run; lost
//! parameter rows (restored from SCAR's running checkpoint) are resynced from the
//! assignments with `recover` and fail the job without it; bad docword/vocab files are
//! refused with the file and line.

use harp::JobConfig;
use harp_apps::data::{load_docword_dir, parse_docword_reader, Corpus};
use harp_apps::lda::{LdaApp, LdaConfig, LdaMetrics, LdaSampler};
use harp_apps::mlr::Quiet;
use harp_tests::{
    harp_binary, read_json_lines, run_cli, run_with_metrics, runtime, shared_data, Threads,
};
use std::path::Path;
use std::sync::Arc;

fn job(workers: u32, executors_per_worker: u32) -> JobConfig {
    JobConfig {
        workers,
        servers: 2,
        executors_per_worker,
        shards_per_server: 4,
        collect_params: true,
        scar: None,
    }
}

fn newsgroups() -> Option<Corpus> {
    let dir = shared_data("newsgroups-subset")?;
    Some(load_docword_dir(&dir).unwrap())
}

struct Run {
    history: Vec<LdaMetrics>,
    /// The word–topic table, `(word, topic) → count`, nonzero entries.
    table: std::collections::BTreeMap<(u32, u32), i64>,
    /// Both rows of the topic totals table.
    totals: [Vec<i64>; 2],
    /// The executors' own counts of their tokens.
    token_counts: std::collections::BTreeMap<(u32, u32), u64>,
    top_words: Vec<Vec<String>>,
    resyncs: u32,
}

fn train(corpus: &Arc<Corpus>, config: LdaConfig, job: &JobConfig) -> Run {
    try_train(corpus, config, job).unwrap()
}

fn try_train(
    corpus: &Arc<Corpus>,
    config: LdaConfig,
    job: &JobConfig,
) -> Result<Run, harp::HarpError> {
    let app = Arc::new(LdaApp::new(config, corpus.clone(), Arc::new(Quiet)).unwrap());
    let outcome = runtime(Threads::Multi(2)).block_on(harp::run_job(app.clone(), job))?;
    let params = outcome.params.expect("collect_params");
    let rows = app.word_rows();
    let k = app.config().topics;
    let mut table = std::collections::BTreeMap::new();
    for (row, values) in params.table(app.word_topic()) {
        for (i, &n) in values.iter().enumerate() {
            if n != 0 {
                let word = row as usize * rows.words_per_row() + i / k;
                table.insert((word as u32, (i % k) as u32), n);
            }
        }
    }
    let totals = [0, 1].map(|r| {
        params
            .row(app.topic_totals(), r)
            .map(<[i64]>::to_vec)
            .unwrap_or_default()
    });
    Ok(Run {
        resyncs: outcome.driver.resyncs(),
        history: outcome.driver.history().to_vec(),
        table,
        totals,
        token_counts: outcome.driver.token_counts().clone(),
        top_words: outcome
            .driver
            .top_words()
            .into_iter()
            .map(|t| t.into_iter().map(|w| w.word).collect())
            .collect(),
    })
}

fn log_likelihoods(history: &[LdaMetrics]) -> Vec<f64> {
    history.iter().map(|m| m.log_likelihood).collect()
}

#[test]
fn lda_on_newsgroups_rises_and_levels_off() {
    let Some(corpus) = newsgroups() else {
        return;
    };
    let corpus = Arc::new(corpus);
    let config = LdaConfig {
        iterations: 40,
        ..LdaConfig::default()
    };
    let run = train(&corpus, config, &job(2, 1));
    let ll = log_likelihoods(&run.history);
    eprintln!("log likelihood per token: {ll:.4?}");
    assert_eq!(ll.len(), 40);
    assert!(ll.iter().all(|x| x.is_finite() && *x < 0.0), "{ll:?}");
    let (first, last) = (ll[0], ll[39]);
    // Random topics start near -9.5 nats per token; 40 sweeps gain well over one nat.
    assert!(last > first + 0.8, "{first} -> {last}");
    // Levelled off: the last five sweeps move it by less than a tenth of the first five.
    let early = ll[5] - ll[0];
    let late = (ll[39] - ll[34]).abs();
    assert!(late < early / 10.0, "first five {early}, last five {late}");
    assert_eq!(run.top_words.len(), 20);
    assert!(
        run.top_words.iter().all(|t| t.len() == 10),
        "{:?}",
        run.top_words
    );
    for (topic, words) in run.top_words.iter().enumerate() {
        eprintln!("topic {topic}: {}", words.join(" "));
    }
}

#[test]
fn the_same_seed_and_executors_give_the_same_run_on_one_or_two_workers() {
    let Some(corpus) = newsgroups() else {
        return;
    };
    let corpus = Arc::new(corpus);
    let config = LdaConfig {
        iterations: 20,
        ..LdaConfig::default()
    };
    // Two executors either way: on one worker, or one on each of two workers. The
    // sampling is a function of the seed and the executor count only (each block's rows
    // are exact at every read, the totals are read from the double-buffered row nobody
    // writes meanwhile, the likelihood parts are added in executor order), so the runs are
    // identical, not merely close: the tolerance is 0.
    let one = train(&corpus, config.clone(), &job(1, 2));
    let two = train(&corpus, config.clone(), &job(2, 1));
    assert_eq!(log_likelihoods(&one.history), log_likelihoods(&two.history));
    assert_eq!(one.table, two.table);
    assert_eq!(one.top_words, two.top_words);

    // Other executor counts cut the vocabulary into other blocks and draw other numbers (and
    // one executor sees exact topic totals): another chain of the same sampler. After 20
    // sweeps (a gain of about 2 nats per token) it must sit within 0.1 nats per token of the
    // 2-executor run. Measured when this test was written, seeds 1 to 5: at 2 executors
    // -8.267 to -8.310 (a spread of 0.043); over 1, 2 and 4 executors -8.254 to -8.310
    // (0.057). So 0.1 is about twice the seed-to-seed spread: a real difference in what the
    // sampler converges to (e.g. stale or lost counts) fails it, chance does not.
    let single = train(&corpus, config.clone(), &job(1, 1));
    let four = train(&corpus, config, &job(2, 2));
    let reference = one.history[19].log_likelihood;
    let gain = reference - one.history[0].log_likelihood;
    assert!(gain > 1.5, "{gain}");
    for (executors, other) in [(1, &single), (4, &four)] {
        let value = other.history[19].log_likelihood;
        assert!(
            (value - reference).abs() < 0.1,
            "{executors} executors: {value} vs {reference} (2 executors)"
        );
        assert_ne!(
            log_likelihoods(&other.history),
            log_likelihoods(&one.history)
        );
    }
}

#[test]
fn the_word_topic_table_equals_the_token_assignments_after_the_run() {
    let Some(corpus) = newsgroups() else {
        return;
    };
    let corpus = Arc::new(corpus);
    let config = LdaConfig {
        iterations: 3,
        report_counts: true,
        ..LdaConfig::default()
    };
    for (workers, per_worker) in [(1, 1), (2, 2), (3, 2)] {
        let run = train(&corpus, config.clone(), &job(workers, per_worker));
        let executors = workers * per_worker;
        // Every (word, topic) count on the servers is exactly the number of tokens of that
        // word the executors hold in that topic (none negative, none missing).
        let assigned: std::collections::BTreeMap<(u32, u32), i64> = run
            .token_counts
            .iter()
            .map(|(&key, &n)| (key, n as i64))
            .collect();
        assert_eq!(run.table, assigned, "{executors} executors");
        // Each word's row sums to its tokens in the corpus.
        let mut per_word = vec![0i64; corpus.num_words()];
        for (&(w, _), &n) in &run.table {
            per_word[w as usize] += n;
        }
        let expected: Vec<i64> = corpus
            .tokens_per_word()
            .into_iter()
            .map(|n| n as i64)
            .collect();
        assert_eq!(per_word, expected, "{executors} executors");
        // The totals row written last (sub-round t writes row (t + 1) mod 2; the run had
        // 3·E sub-rounds) holds the column sums of the table.
        let mut columns = vec![0i64; 20];
        for (&(_, z), &n) in &run.table {
            columns[z as usize] += n;
        }
        let last_step = u64::from(3 * executors);
        assert_eq!(
            run.totals[((last_step + 1) % 2) as usize],
            columns,
            "{executors} executors"
        );
    }
}

#[test]
fn the_parallel_sampler_learns_keeps_the_tables_exact_and_is_the_same_on_any_workers() {
    let Some(corpus) = newsgroups() else {
        return;
    };
    let corpus = Arc::new(corpus);
    let parallel = LdaConfig {
        iterations: 60,
        report_counts: true,
        sampler: LdaSampler::Parallel,
        ..LdaConfig::default()
    };
    let one = train(&corpus, parallel.clone(), &job(1, 2));
    let two = train(&corpus, parallel.clone(), &job(2, 1));
    // A function of the seed and the executor count, as the sequential sampler: identical.
    assert_eq!(log_likelihoods(&one.history), log_likelihoods(&two.history));
    assert_eq!(one.table, two.table);
    // The tables equal the assignments after the moves.
    let assigned: std::collections::BTreeMap<(u32, u32), i64> = two
        .token_counts
        .iter()
        .map(|(&key, &n)| (key, n as i64))
        .collect();
    assert_eq!(two.table, assigned);
    // It learns like the sequential sampler, a little slower: a block's tokens (a whole
    // document's among them) do not see each other's moves. Measured when this test was
    // written: -11.17 after the first sweep (sequential -10.36), -8.48 after 20 (-8.31),
    // -8.157 after 60 (-8.061), still rising. So within 0.15 nats per token after 60.
    let sequential = train(
        &corpus,
        LdaConfig {
            sampler: LdaSampler::Sequential,
            ..parallel
        },
        &job(2, 1),
    );
    assert_ne!(
        log_likelihoods(&sequential.history),
        log_likelihoods(&two.history)
    );
    let (got, want) = (
        two.history[59].log_likelihood,
        sequential.history[59].log_likelihood,
    );
    eprintln!("after 60 sweeps: parallel {got}, sequential {want}");
    assert!(got > two.history[0].log_likelihood + 2.5, "{got}");
    let late = (two.history[59].log_likelihood - two.history[49].log_likelihood).abs();
    let early = two.history[10].log_likelihood - two.history[0].log_likelihood;
    assert!(
        late < early / 10.0,
        "first ten sweeps {early}, last ten {late}"
    );
    assert!(
        (got - want).abs() < 0.15,
        "parallel {got} vs sequential {want}"
    );
}

/// SCAR's running checkpoint saving every row every iteration, and half of the rows lost
/// at the end of iteration 2, before that iteration's round: they come back with their
/// values after iteration 1, which no longer match the executors' topic assignments.
fn job_losing_rows_after_iteration_2() -> JobConfig {
    JobConfig {
        scar: Some(harp::ScarOptions {
            period: 1,
            fraction: 1.0,
            inject: vec![harp::Injection {
                at_iteration: 2,
                fault: harp::Fault::Lose {
                    fraction: 0.5,
                    seed: 3,
                },
                timing: harp::FaultTiming::BeforeRound,
            }],
            ..harp::ScarOptions::default()
        }),
        ..job(2, 1)
    }
}

#[test]
fn lost_rows_are_resynced_from_the_assignments_with_recover_and_fail_the_job_without() {
    let Some(corpus) = newsgroups() else {
        return;
    };
    let corpus = Arc::new(corpus);
    let config = LdaConfig {
        iterations: 10,
        report_counts: true,
        ..LdaConfig::default()
    };
    // Without `recover` the exclusivity check refuses the restored rows.
    let error = try_train(
        &corpus,
        config.clone(),
        &job_losing_rows_after_iteration_2(),
    )
    .err()
    .expect("the job must fail without recover")
    .to_string();
    assert!(
        error.contains("differs from what its previous owner left")
            || error.contains("differ from what the driver expects"),
        "{error}"
    );
    let undisturbed = train(&corpus, config.clone(), &job(2, 1));
    assert_eq!(undisturbed.resyncs, 0);
    let recovering = LdaConfig {
        recover: true,
        ..config
    };
    let run = train(&corpus, recovering, &job_losing_rows_after_iteration_2());
    // One resync, after iteration 3 (the first to read the restored rows).
    assert_eq!(run.resyncs, 1);
    let resyncs: Vec<u32> = run.history.iter().map(|m| m.resyncs).collect();
    assert_eq!(resyncs, [0, 0, 1, 1, 1, 1, 1, 1, 1, 1]);
    // Iterations 1 and 2 are the undisturbed run's, exactly.
    assert_eq!(
        log_likelihoods(&run.history[..2]),
        log_likelihoods(&undisturbed.history[..2])
    );
    // The tables equal the assignments again.
    let assigned: std::collections::BTreeMap<(u32, u32), i64> = run
        .token_counts
        .iter()
        .map(|(&key, &n)| (key, n as i64))
        .collect();
    assert_eq!(run.table, assigned);
    let mut columns = vec![0i64; 20];
    for (&(_, z), &n) in &run.table {
        columns[z as usize] += n;
    }
    let last_step = 10 * 2; // sub-rounds of the run (the resync has none)
    assert_eq!(run.totals[(last_step + 1) % 2], columns);
    // And the chain goes on as a chain of the same sampler: within 0.1 nats per token of the
    // undisturbed run (see the seed spread measured above).
    let (got, want) = (
        run.history[9].log_likelihood,
        undisturbed.history[9].log_likelihood,
    );
    eprintln!("log likelihood per token after 10 iterations: {got} (undisturbed {want})");
    assert!((got - want).abs() < 0.1, "{got} vs {want}");
}

/// A small corpus written as files: 60 documents over 40 words from 3 word clusters.
fn write_small_corpus(dir: &Path) {
    let mut lines = Vec::new();
    let mut state = 11u64;
    let mut next = move |n: u64| {
        state = state
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        (state >> 33) % n
    };
    for d in 1..=60u64 {
        let cluster = d % 3;
        let mut words = std::collections::BTreeMap::new();
        for _ in 0..30 {
            let w = 1 + cluster * 13 + next(14);
            *words.entry(w).or_insert(0u64) += 1;
        }
        for (w, c) in words {
            lines.push(format!("{d} {w} {c}"));
        }
    }
    let text = format!("60\n40\n{}\n{}\n", lines.len(), lines.join("\n"));
    std::fs::write(dir.join("docword.txt"), text).unwrap();
    let vocab: Vec<String> = (1..=40).map(|w| format!("w{w}")).collect();
    std::fs::write(dir.join("vocab.txt"), vocab.join("\n") + "\n").unwrap();
}

#[test]
fn lda_across_node_processes_matches_the_run_in_one_process() {
    let dir = tempfile::tempdir().unwrap();
    write_small_corpus(dir.path());
    let run = |extra: &[&str], metrics: &str| -> (Vec<f64>, String) {
        let metrics = dir.path().join(metrics);
        let mut args = vec![
            "run",
            "lda",
            "--data",
            dir.path().to_str().unwrap(),
            "--topics",
            "3",
            "--iterations",
            "4",
            "--top-words",
            "5",
            "--executors-per-worker",
            "2",
        ];
        args.extend_from_slice(extra);
        let (out, lines) = run_with_metrics(&harp_binary!(), &args, &metrics, "log_likelihood");
        let ll = lines
            .iter()
            .filter_map(|r| r["log_likelihood"].as_f64())
            .collect();
        let topics = out
            .stdout
            .lines()
            .filter(|l| l.starts_with("topic"))
            .collect::<Vec<_>>()
            .join("\n");
        (ll, topics)
    };
    // --processes N runs N - 1 node processes of one worker each: 2 executors on one node
    // process, then 4 on two (whose caches and flushes race each other), against the same
    // executors in one process. The same sampling, so the same figures.
    for (processes, workers) in [("2", "1"), ("3", "2")] {
        let (local, local_topics) = run(&["--workers", workers], "local.jsonl");
        let (across, across_topics) = run(&["--processes", processes], "across.jsonl");
        assert_eq!(local.len(), 4);
        assert_eq!(local, across, "--processes {processes}");
        assert_eq!(local_topics.lines().count(), 3, "{local_topics}");
        assert_eq!(local_topics, across_topics, "--processes {processes}");
    }
    // The metrics carry the throughput too.
    let first = &read_json_lines(&dir.path().join("local.jsonl"))[0];
    assert!(first["tokens_per_s"].as_f64().unwrap() > 0.0, "{first}");
    assert_eq!(first["iteration"].as_u64(), Some(1));
}

#[test]
fn bad_docword_files_are_refused_with_the_file_and_line() {
    let dir = tempfile::tempdir().unwrap();
    for (name, docword, vocab, needle) in [
        (
            "word-range",
            "2\n3\n2\n1 1 1\n2 4 1\n",
            "a\nb\nc\n",
            "docword.txt: line 5: word id 4 out of range (valid: 1..=3",
        ),
        (
            "doc-range",
            "2\n3\n1\n0 1 1\n",
            "a\nb\nc\n",
            "docword.txt: line 4: document id 0 out of range",
        ),
        (
            "nnz",
            "2\n3\n5\n1 1 1\n",
            "a\nb\nc\n",
            "line 3: the header declares 5 entry lines (NNZ), the file has 1",
        ),
        (
            "zero-count",
            "2\n3\n1\n1 1 0\n",
            "a\nb\nc\n",
            "docword.txt: line 4: the count is 0",
        ),
        (
            "vocab",
            "2\n3\n1\n1 1 2\n",
            "a\nb\n",
            "vocab.txt: shape mismatch: 2 words (lines), but",
        ),
    ] {
        let sub = dir.path().join(name);
        std::fs::create_dir(&sub).unwrap();
        std::fs::write(sub.join("docword.txt"), docword).unwrap();
        std::fs::write(sub.join("vocab.txt"), vocab).unwrap();
        let error = run_cli(["run", "lda", "--data", sub.to_str().unwrap()])
            .unwrap_err()
            .to_string();
        assert!(
            error.contains(name) && error.contains(needle),
            "{name}: {error}"
        );
    }
    let error = run_cli(["run", "lda", "--data", "/nonexistent/corpus"])
        .unwrap_err()
        .to_string();
    assert!(error.contains("/nonexistent/corpus"), "{error}");
    // The parser is the same one the command uses.
    assert!(parse_docword_reader("1\n1\n1\n1 1 1\n".as_bytes(), Path::new("x")).is_ok());
}

/// A small corpus made here: 30 documents of 6 distinct words each (ascending, counts 1–3)
/// over a vocabulary of 40.
fn small_corpus() -> Corpus {
    let mut doc_offsets = vec![0];
    let (mut words, mut counts) = (Vec::new(), Vec::new());
    for d in 0..30u32 {
        let mut doc: Vec<u32> = (0..6).map(|i| (d * 7 + i * 5) % 40).collect();
        doc.sort_unstable();
        doc.dedup();
        for (i, w) in doc.into_iter().enumerate() {
            words.push(w);
            counts.push(1 + (d + i as u32) % 3);
        }
        doc_offsets.push(words.len());
    }
    Corpus {
        doc_offsets,
        words,
        counts,
        vocab: (0..40).map(|w| format!("w{w}")).collect(),
        source: "small corpus".into(),
    }
}

/// `harp run lda --check-counts`' check ([`LdaApp::check_tables`]): after a run it finds
/// the tables equal to the assignments and counts every token; one count off in the
/// word–topic table or in either totals row, and it names what differs.
#[test]
fn the_tables_check_passes_after_a_run_and_names_a_count_that_is_off() {
    let corpus = Arc::new(small_corpus());
    let config = LdaConfig {
        topics: 5,
        iterations: 3,
        report_counts: true,
        ..LdaConfig::default()
    };
    let app = Arc::new(LdaApp::new(config, corpus.clone(), Arc::new(Quiet)).unwrap());
    let outcome = runtime(Threads::Multi(2))
        .block_on(harp::run_job(app.clone(), &job(2, 2)))
        .unwrap();
    let params = outcome.params.expect("collect_params");
    let driver = &outcome.driver;
    assert_eq!(
        app.check_tables(&params, driver),
        Ok(corpus.num_tokens()),
        "after a run"
    );
    let off_by_one = |table: harp::TableId, row: u64, at: usize| {
        let mut changed = params.clone();
        let key = harp::ParamKey::new(table, row);
        let Some(harp::RowData::I64(values)) = changed.rows.get_mut(&key) else {
            panic!("no i64 row {key:?}");
        };
        values[at] += 1;
        app.check_tables(&changed, driver)
    };
    let (first_row, _) = params.table(app.word_topic()).next().unwrap();
    let error = off_by_one(app.word_topic().id(), first_row, 0).unwrap_err();
    let word = first_row as usize * app.word_rows().words_per_row();
    assert!(
        error.contains(&format!("word {word} topic 0: the table holds")),
        "{error}"
    );
    // 3 iterations of 4 sub-rounds: the last, sub-round 12, wrote row 1.
    assert_eq!(driver.current_totals_row(), 1);
    let error = off_by_one(app.topic_totals().id(), 1, 2).unwrap_err();
    assert!(error.contains("topic totals row 1"), "{error}");
    // A table wrong everywhere: five listed, the rest counted.
    let mut shifted = params.clone();
    let mut values_off = 0;
    for (key, row) in shifted.rows.iter_mut() {
        if let (true, harp::RowData::I64(values)) = (key.table == app.word_topic().id(), row) {
            values.iter_mut().for_each(|v| *v += 1);
            values_off += values.len();
        }
    }
    let error = app.check_tables(&shifted, driver).unwrap_err();
    assert_eq!(error.lines().count(), 6, "{error}");
    assert!(
        error.ends_with(&format!("and {} more", values_off - 5)),
        "{values_off} values off: {error}"
    );
    // The other row holds the totals a sub-round earlier: it is not checked.
    assert_eq!(
        off_by_one(app.topic_totals().id(), 0, 2),
        Ok(corpus.num_tokens())
    );
}
