"""reaper's SQL, one named statement per file: installed as the package ``reaper.sql``.

This folder is the source tree's top-level ``sql/``; pyproject.toml maps it into the package
(``[tool.setuptools.package-dir]``), so a wheel ships it as ``reaper/sql/`` and an editable
install imports it from here. The marker file makes it a regular package, which an editable
install can map (it cannot map a namespace folder inside a regular package).
:mod:`reaper.sqltext` reads the files.
"""
