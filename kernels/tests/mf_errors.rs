//! Every bad MF input is reported as the right `KernelError`, without panicking and
//! without touching any output.

use harp_kernels::mf::reference::{als_half_step_reference, sgd_step_reference};
use harp_kernels::mf::{als_half_step, rmse, sgd_step, squared_error_sum, Csr, Ratings, Sgd};
use harp_kernels::KernelError;

const SGD: Sgd = Sgd {
    lr: 0.1,
    lambda: 0.01,
};

/// Runs SGD (fast and reference) and the loss functions on the case; all must fail
/// with `expected` and leave `p`, `q` untouched.
fn expect_sgd_err(
    k: usize,
    sgd: Sgd,
    u: &[u32],
    i: &[u32],
    r: &[f32],
    (p_len, q_len): (usize, usize),
    expected: KernelError,
) {
    let ratings = Ratings {
        users: u,
        items: i,
        values: r,
    };
    let (p0, q0) = (vec![0.5f32; p_len], vec![0.25f32; q_len]);
    let (mut p, mut q) = (p0.clone(), q0.clone());
    assert_eq!(
        sgd_step(k, sgd, ratings, &mut p, &mut q),
        Err(expected.clone())
    );
    assert_eq!((&p, &q), (&p0, &q0), "sgd_step wrote");
    assert_eq!(
        sgd_step_reference(k, sgd, ratings, &mut p, &mut q),
        Err(expected.clone())
    );
    assert_eq!((&p, &q), (&p0, &q0), "sgd_step_reference wrote");
    if !matches!(expected, KernelError::InvalidHyperparameter { .. }) {
        assert_eq!(squared_error_sum(k, ratings, &p, &q), Err(expected.clone()));
        assert_eq!(rmse(k, ratings, &p, &q), Err(expected));
    }
}

#[test]
fn sgd_and_loss_errors() {
    let (u, i, r) = ([0u32, 1, 1], [2u32, 0, 1], [1.0f32, 2.0, 3.0]);
    // Two users, three items, rank 2.
    let mism = |what, expected, actual| KernelError::LengthMismatch {
        what,
        expected,
        actual,
    };
    expect_sgd_err(
        0,
        SGD,
        &u,
        &i,
        &r,
        (4, 6),
        KernelError::ZeroDimension { what: "rank" },
    );
    expect_sgd_err(2, SGD, &u, &i, &r, (5, 6), mism("p", 4, 5));
    expect_sgd_err(2, SGD, &u, &i, &r, (4, 7), mism("q", 6, 7));
    expect_sgd_err(2, SGD, &u[..2], &i, &r, (4, 6), mism("users", 3, 2));
    expect_sgd_err(2, SGD, &u, &i[..1], &r, (4, 6), mism("items", 3, 1));
    let oor = |what, position, index| KernelError::IndexOutOfRange {
        what,
        position,
        index,
    };
    expect_sgd_err(2, SGD, &[0, 2, 1], &i, &r, (4, 6), oor("users", 1, 2));
    expect_sgd_err(2, SGD, &u, &[0, 1, 3], &r, (4, 6), oor("items", 2, 3));
    for bad in [f32::NAN, f32::INFINITY, f32::NEG_INFINITY] {
        expect_sgd_err(
            2,
            SGD,
            &u,
            &i,
            &[1.0, bad, 0.0],
            (4, 6),
            KernelError::InvalidValue {
                what: "values",
                position: 1,
            },
        );
    }
    for (sgd, what, value) in [
        (
            Sgd {
                lr: -0.1,
                lambda: 0.0,
            },
            "lr",
            -0.1,
        ),
        (
            Sgd {
                lr: 0.1,
                lambda: f32::INFINITY,
            },
            "lambda",
            f32::INFINITY,
        ),
    ] {
        expect_sgd_err(
            2,
            sgd,
            &u,
            &i,
            &r,
            (4, 6),
            KernelError::InvalidHyperparameter { what, value },
        );
    }
    let empty = Ratings {
        users: &[],
        items: &[],
        values: &[],
    };
    assert_eq!(
        rmse(2, empty, &[0.0; 4], &[0.0; 6]),
        Err(KernelError::ZeroDimension { what: "ratings" })
    );
    assert_eq!(squared_error_sum(2, empty, &[0.0; 4], &[0.0; 6]), Ok(0.0));
}

/// Runs both ALS versions; both must fail with `expected` and leave `out` untouched.
fn expect_als_err(
    k: usize,
    lambda: f32,
    c: Csr<'_>,
    fixed: &[f32],
    out_len: usize,
    expected: KernelError,
) {
    let mut out = vec![42.0f32; out_len];
    assert_eq!(
        als_half_step(k, lambda, c, fixed, &mut out),
        Err(expected.clone())
    );
    assert!(out.iter().all(|&v| v == 42.0), "als_half_step wrote");
    assert_eq!(
        als_half_step_reference(k, lambda, c, fixed, &mut out),
        Err(expected)
    );
    assert!(
        out.iter().all(|&v| v == 42.0),
        "als_half_step_reference wrote"
    );
}

#[test]
fn als_errors() {
    // Three rows over two columns, rank 2.
    let (offsets, cols, values) = ([0u32, 2, 2, 3], [0u32, 1, 1], [1.0f32, 2.0, 3.0]);
    let fixed = [1.0f32, 0.0, 0.0, 1.0];
    let c = |o: &'static [u32], cl: &'static [u32], v: &'static [f32]| Csr {
        offsets: o,
        cols: cl,
        values: v,
    };
    let good = Csr {
        offsets: &offsets,
        cols: &cols,
        values: &values,
    };
    let mut out = vec![0.0f32; 6];
    als_half_step(2, 0.1, good, &fixed, &mut out).unwrap();

    expect_als_err(
        0,
        0.1,
        good,
        &fixed,
        6,
        KernelError::ZeroDimension { what: "rank" },
    );
    for lambda in [0.0, -1.0, f32::NAN] {
        let e = als_half_step(2, lambda, good, &fixed, &mut out);
        assert!(matches!(
            e,
            Err(KernelError::InvalidHyperparameter { what: "lambda", .. })
        ));
    }
    let mism = |what, expected, actual| KernelError::LengthMismatch {
        what,
        expected,
        actual,
    };
    expect_als_err(2, 0.1, good, &fixed[..3], 6, mism("fixed", 2, 3));
    expect_als_err(2, 0.1, good, &fixed, 4, mism("out", 6, 4));
    expect_als_err(
        2,
        0.1,
        c(&[0, 2, 2, 3], &[0, 1, 1], &[1.0, 2.0]),
        &fixed,
        6,
        mism("values", 3, 2),
    );
    expect_als_err(2, 0.1, c(&[], &[], &[]), &fixed, 0, mism("offsets", 1, 0));
    let off = |position, index| KernelError::IndexOutOfRange {
        what: "offsets",
        position,
        index,
    };
    expect_als_err(
        2,
        0.1,
        c(&[1, 2, 2, 3], &[0, 1, 1], &[1.0; 3]),
        &fixed,
        6,
        off(0, 1),
    );
    expect_als_err(
        2,
        0.1,
        c(&[0, 2, 1, 3], &[0, 1, 1], &[1.0; 3]),
        &fixed,
        6,
        off(2, 1),
    );
    expect_als_err(
        2,
        0.1,
        c(&[0, 2, 2, 2], &[0, 1, 1], &[1.0; 3]),
        &fixed,
        6,
        off(3, 2),
    );
    expect_als_err(
        2,
        0.1,
        c(&[0, 2, 2, 3], &[0, 2, 1], &[1.0; 3]),
        &fixed,
        6,
        KernelError::IndexOutOfRange {
            what: "cols",
            position: 1,
            index: 2,
        },
    );
    expect_als_err(
        2,
        0.1,
        c(&[0, 2, 2, 3], &[0, 1, 1], &[1.0, f32::NAN, 1.0]),
        &fixed,
        6,
        KernelError::InvalidValue {
            what: "values",
            position: 1,
        },
    );
    expect_als_err(
        2,
        0.1,
        good,
        &[1.0, 0.0, f32::INFINITY, 1.0],
        6,
        KernelError::InvalidValue {
            what: "fixed",
            position: 2,
        },
    );
    // Finite inputs whose f32 normal matrix overflows: the factorization fails in row 0
    // (the f64 reference does not overflow, so only the fast path is checked).
    let mut out = vec![42.0f32; 6];
    let huge = [3e19f32, 0.0, 0.0, 1.0];
    assert_eq!(
        als_half_step(2, 0.1, good, &huge, &mut out),
        Err(KernelError::NotPositiveDefinite { row: 0 })
    );
    assert!(out.iter().all(|&v| v == 42.0));
}
