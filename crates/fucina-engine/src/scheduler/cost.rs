//! How a batched forward's time is shared among the requests in it, for their
//! speculation gates: a forward costs about `a + b·rows` (`a`: reading the weights,
//! whatever the rows; `b`: each row's compute), fitted online over recent forwards,
//! and each of the forward's `s` items is charged `a / s` plus `b` per row it brought.
//! A request that drafts is so charged what its verify rows add to the shared step,
//! and its gate keeps drafting only while those rows commit enough tokens to pay.

/// Weight of the previous forwards at each new one (the fit follows the machine).
const DECAY: f64 = 0.97;

/// Least-squares fit of a forward's seconds against its rows, decayed.
#[derive(Clone, Debug, Default)]
pub(crate) struct StepCost {
    w: f64,
    sx: f64,
    sy: f64,
    sxx: f64,
    sxy: f64,
}

impl StepCost {
    /// A forward of `rows` rows took `secs`.
    pub(crate) fn observe(&mut self, rows: usize, secs: f64) {
        let x = rows as f64;
        self.w = self.w * DECAY + 1.0;
        self.sx = self.sx * DECAY + x;
        self.sy = self.sy * DECAY + secs;
        self.sxx = self.sxx * DECAY + x * x;
        self.sxy = self.sxy * DECAY + x * secs;
    }

    /// `(a, b)`: seconds a forward costs whatever its rows, and per row; `None` until
    /// forwards of different sizes were seen (or where they fit no positive slope).
    pub(crate) fn fit(&self) -> Option<(f64, f64)> {
        if self.w < 2.0 {
            return None;
        }
        let (mx, my) = (self.sx / self.w, self.sy / self.w);
        let var = self.sxx / self.w - mx * mx;
        if var < 0.25 {
            return None;
        }
        let b = (self.sxy / self.w - mx * my) / var;
        (b > 0.0).then(|| ((my - b * mx).max(0.0), b))
    }

    /// The share of a forward of `total` rows over `items` items that took `secs`
    /// charged to an item of `n` rows (the shares of all items add up to `secs`).
    /// Without a fit, half the time counts as fixed.
    pub(crate) fn share(&self, secs: f64, n: usize, items: usize, total: usize) -> f64 {
        let (items, total) = (items.max(1) as f64, total.max(1) as f64);
        let (a, b) = self.fit().unwrap_or((0.5 * secs, 0.5 * secs / total));
        let model = a + b * total;
        if model <= 0.0 {
            return secs * n as f64 / total;
        }
        secs * (a / items + b * n as f64) / model
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fits_fixed_and_per_row_costs_and_shares_add_up() {
        let mut c = StepCost::default();
        assert!(c.fit().is_none());
        // 10 ms + 1.5 ms per row, exactly.
        for rows in [8, 40, 8, 24, 72, 8, 16] {
            c.observe(rows, 0.010 + 0.0015 * rows as f64);
        }
        let (a, b) = c.fit().expect("a fit");
        assert!(
            (a - 0.010).abs() < 1e-9 && (b - 0.0015).abs() < 1e-9,
            "{a} {b}"
        );
        // A step of 8 plain rows and one verify of 9 rows: 9 items, 17 rows.
        let secs = 0.010 + 0.0015 * 17.0;
        let plain = c.share(secs, 1, 9, 17);
        let verify = c.share(secs, 9, 9, 17);
        assert!((8.0 * plain + verify - secs).abs() < 1e-12);
        assert!((plain - (0.010 / 9.0 + 0.0015)).abs() < 1e-12);
        assert!(verify > 5.0 * plain);
    }

    #[test]
    fn same_sized_forwards_share_half_as_fixed() {
        let mut c = StepCost::default();
        for _ in 0..10 {
            c.observe(8, 0.02);
        }
        assert!(c.fit().is_none());
        let s = c.share(0.02, 1, 8, 8);
        assert!((s - 0.02 / 8.0).abs() < 1e-12);
        // Decreasing time with rows fits no positive slope.
        let mut d = StepCost::default();
        d.observe(4, 0.03);
        d.observe(16, 0.01);
        assert!(d.fit().is_none());
    }
}
