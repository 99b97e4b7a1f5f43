"""The calibrator contract (topcal.testing.check_calibrator) over every registered method."""

import numpy as np
import pytest

import topcal
from topcal.errors import TopcalError
from topcal.testing import CHECKS, check_calibrator

#: methods whose contract run takes several seconds on the 2-core machine (the slow lane), and
#: bandwidth or cut variants whose code paths a fast-lane method takes too (kde-mon and kde-mon4:
#: kde-mon2's rule with another constant; cum-median: cum's curve cut at another quantile)
SLOW = {"kde-opt", "auto", "kde-mon", "kde-mon4", "cum-median"}


def _params(names):
    return [pytest.param(n, marks=pytest.mark.slow) if n in SLOW else n for n in names]


@pytest.mark.parametrize("name", _params(topcal.available_methods()))
def test_every_registered_method_passes_the_contract(name):
    check_calibrator(name, checks=[c for c in CHECKS if c != "engines"])


@pytest.mark.parametrize("name", _params(topcal.available_methods()))
def test_every_registered_method_fits_alike_whole_and_streamed(name):
    check_calibrator(name, checks=["engines"])


@pytest.mark.slow
@pytest.mark.parametrize("name", ["hist", "kde-mon2", "sts", "hier-platt", "pooled-beta", "auto"])
def test_streamed_and_dask_fits_are_the_same_model(name, cluster_address):
    check_calibrator(name, checks=["engines"], scheduler=cluster_address)


def test_the_contract_accepts_a_class_and_rejects_unknown_names_and_checks():
    check_calibrator(topcal.calibrators.get_class("hist"), checks=["params"])
    with pytest.raises(TopcalError, match="Options are"):
        check_calibrator("no-such-method")
    with pytest.raises(TopcalError, match="unknown checks"):
        check_calibrator("hist", checks=["nope"])


def test_the_contract_catches_confidences_outside_the_unit_interval(monkeypatch):
    cls = topcal.calibrators.get_class("hist")
    real = cls.predict
    monkeypatch.setattr(cls, "predict", lambda self, data, *a, **k: real(self, data, *a, **k) * 1.5)
    with pytest.raises(AssertionError, match="hist: fit/predict: confidences outside"):
        check_calibrator("hist", checks=["fit_predict"])


def test_the_contract_catches_a_reload_that_predicts_otherwise(monkeypatch):
    cls = topcal.calibrators.get_class("hist")
    real = cls.from_dict.__func__

    def shifted(klass, d):
        model = real(klass, d)
        model.predict = lambda data, *a, **k: np.clip(real_predict(model, data) + 1e-9, 0, 1)
        return model

    real_predict = cls.predict
    monkeypatch.setattr(cls, "from_dict", classmethod(shifted))
    with pytest.raises(AssertionError, match="hist: persistence: reloaded predictions differ"):
        check_calibrator("hist", checks=["persistence"])


def test_the_contract_catches_an_update_that_ignores_the_new_rows(monkeypatch):
    cls = topcal.calibrators.get_class("hist")
    monkeypatch.setattr(cls, "update", lambda self, *a, **k: self)
    with pytest.raises(AssertionError, match="hist: update: .* differs"):
        check_calibrator("hist", checks=["update"], atol=1e-6)
