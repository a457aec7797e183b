import './base.css';
import './timetravel.css';
import './evaluation.css';
import './lineage.css';
import './cells.css';
