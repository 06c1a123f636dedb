"""LARS against its formula by hand; AAVG's BN merge, averaging and batch rule."""
import pytest
import torch

from trainer.methods.aavg import BatchSizeController, average_learners, merge_bn_stats, should_average
from trainer.methods.lars import LARS


def test_lars_one_update_by_hand():
    w0 = torch.tensor([3.0, 4.0])                     # ||w|| = 5
    g = torch.tensor([0.6, 0.8])                       # ||g|| = 1
    lr, m, wd, trust = 0.5, 0.9, 0.01, 0.001
    local = trust * 5.0 / (1.0 + wd * 5.0)             # 0.0047619...
    d = g + wd * w0
    expect_v = lr * local * d                          # v0 = 0
    p = torch.nn.Parameter(w0.clone())
    opt = LARS([p], lr=lr, momentum=m, weight_decay=wd, trust_coefficient=trust)
    p.grad = g.clone()
    opt.step()
    assert torch.allclose(p.detach(), w0 - expect_v, atol=1e-7)
    # Second step: momentum carries the first update.
    w1 = p.detach().clone()
    p.grad = g.clone()
    opt.step()
    local1 = trust * w1.norm() / (g.norm() + wd * w1.norm())
    v1 = m * expect_v + lr * local1 * (g + wd * w1)
    assert torch.allclose(p.detach(), w1 - v1, atol=1e-7)


def test_lars_excluded_group_is_plain_momentum_sgd():
    p = torch.nn.Parameter(torch.tensor([1.0, -2.0]))
    opt = LARS([{"params": [p], "lars": False, "weight_decay": 0.0}], lr=0.1, momentum=0.9)
    p.grad = torch.tensor([0.5, 0.5])
    opt.step()
    assert torch.allclose(p.detach(), torch.tensor([0.95, -2.05]))


def test_bn_merge_equals_pooled_statistics():
    torch.manual_seed(0)
    learners = [torch.randn(32, 5) * (i + 1) + i for i in range(4)]   # equal batch sizes
    means = torch.stack([x.mean(0) for x in learners])
    variances = torch.stack([x.var(0, unbiased=False) for x in learners])
    mean, var = merge_bn_stats(means, variances)
    pooled = torch.cat(learners)
    assert torch.allclose(mean, pooled.mean(0), atol=1e-5)
    assert torch.allclose(var, pooled.var(0, unbiased=False), atol=1e-4)


def _learner(seed):
    torch.manual_seed(seed)
    model = torch.nn.Sequential(torch.nn.Linear(4, 3), torch.nn.BatchNorm1d(3), torch.nn.Linear(3, 2))
    opt = torch.optim.Adam(model.parameters(), lr=0.01)
    x = torch.randn(8, 4) + seed
    model(x).sum().backward()
    opt.step()
    return model, opt


def test_average_learners_simulated_allreduce():
    """Two learners averaged through a shared 'allreduce': identical parameters, averaged moments."""
    a, oa = _learner(1)
    b, ob = _learner(2)
    pa, pb = [p.detach().clone() for p in a.parameters()], [p.detach().clone() for p in b.parameters()]
    ma = [oa.state[p]["exp_avg_sq"].clone() for p in a.parameters()]
    mb = [ob.state[p]["exp_avg_sq"].clone() for p in b.parameters()]
    bn_a, bn_b = a[1], b[1]
    mean_expect, var_expect = merge_bn_stats(torch.stack([bn_a.running_mean, bn_b.running_mean]),
                                             torch.stack([bn_a.running_var, bn_b.running_var]))
    # A two-party allreduce: the calls happen in the same order on both learners.
    calls_a = []
    average_learners(a, oa, lambda t: calls_a.append(t) or t)
    calls_b = []
    average_learners(b, ob, lambda t: calls_b.append(t) or t)
    # Replay with the real averages.
    a2, oa2 = _learner(1)
    b2, ob2 = _learner(2)
    it = iter([(x + y) / 2 for x, y in zip(calls_a, calls_b)])
    average_learners(a2, oa2, lambda t: next(it).clone())
    it = iter([(x + y) / 2 for x, y in zip(calls_a, calls_b)])
    average_learners(b2, ob2, lambda t: next(it).clone())
    for p, q, x, y in zip(a2.parameters(), b2.parameters(), pa, pb):
        assert torch.equal(p, q) and torch.allclose(p, (x + y) / 2)
    for p, q, x, y in zip(a2.parameters(), b2.parameters(), ma, mb):
        assert torch.allclose(oa2.state[p]["exp_avg_sq"], (x + y) / 2)
        assert torch.equal(oa2.state[p]["exp_avg_sq"], ob2.state[q]["exp_avg_sq"])
    assert torch.allclose(a2[1].running_mean, mean_expect) and torch.allclose(a2[1].running_var, var_expect, atol=1e-6)


def test_batch_rule_triggers_exactly_when_accuracy_below_best():
    c = BatchSizeController(batch=36, every=10, b1=1.0, b2=2.0, max_batch=576)
    assert [c.due(s) for s in (0, 5, 10, 20)] == [False, False, True, True]
    seq = [(10, 0.30, 36), (20, 0.40, 36), (30, 0.39, 72), (40, 0.41, 72), (50, 0.41, 72),
           (60, 0.10, 144), (70, 0.2, 288), (80, 0.3, 576), (90, 0.3, 576)]
    for step, acc, batch in seq:
        assert c.observe(step, acc) == batch, (step, acc)
    assert c.best == pytest.approx(0.41)


def test_batch_rule_with_b1_margin():
    c = BatchSizeController(batch=10, every=1, b1=0.9, b2=3.0, max_batch=1000)
    c.observe(1, 0.5)
    assert c.observe(2, 0.46) == 10      # 0.46 >= 0.45
    assert c.observe(3, 0.44) == 30      # 0.44 < 0.45


@pytest.mark.parametrize("k,steps,expect", [(-1, 5, [4]), (2, 5, [1, 3]), (1, 3, [0, 1, 2])])
def test_should_average(k, steps, expect):
    assert [s for s in range(steps) if should_average(s, steps, k)] == expect
