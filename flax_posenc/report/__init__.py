"""The reporting wing: what flax-posenc prints and draws about a position table or a SOURCE.

- :mod:`flax_posenc.report.analysis`: properties of a table (norms, similarity, uniqueness,
  spectrum), numpy only;
- :mod:`flax_posenc.report.plots`: the figures (PNG; matplotlib imported when one is drawn);
- :mod:`flax_posenc.report.cli`: the ``flax-posenc`` command;
- :mod:`flax_posenc.report.tour`: the ``flax-posenc tour`` demo (``make tour``);
- :mod:`flax_posenc.report.output`: what the command and the tour print besides reports.

The wing sits on top: it imports the core (``conversion``, ``limits``, the configs), and no
module outside it imports plotting code (``tests/test_import_graph.py`` checks it). The old
paths ``flax_posenc.analysis``, ``flax_posenc.plots``, ``flax_posenc.cli`` and
``flax_posenc.tour`` still import: they are aliases of these modules.
"""
