-- A small school: teachers, courses, students and enrolments with grades.
-- Written for Palaestra (Apache-2.0). Loaded into a fresh in-memory database per session.
CREATE TABLE teachers (
  id INTEGER PRIMARY KEY,
  name TEXT NOT NULL,
  department TEXT NOT NULL,
  hired INTEGER NOT NULL
);
CREATE TABLE courses (
  id INTEGER PRIMARY KEY,
  code TEXT NOT NULL UNIQUE,
  title TEXT NOT NULL,
  credits INTEGER NOT NULL,
  teacher_id INTEGER REFERENCES teachers(id)
);
CREATE TABLE students (
  id INTEGER PRIMARY KEY,
  name TEXT NOT NULL,
  year INTEGER NOT NULL CHECK (year BETWEEN 1 AND 4),
  house TEXT NOT NULL
);
CREATE TABLE enrollments (
  student_id INTEGER NOT NULL REFERENCES students(id),
  course_id INTEGER NOT NULL REFERENCES courses(id),
  grade INTEGER,  -- 0-100; NULL while the course is in progress
  PRIMARY KEY (student_id, course_id)
);
INSERT INTO teachers VALUES
  (1, 'Margaret Hale', 'Mathematics', 2009),
  (2, 'Osei Mensah', 'Physics', 2015),
  (3, 'Lucia Ferri', 'Literature', 2012),
  (4, 'Tomas Berg', 'Mathematics', 2020),
  (5, 'Aiko Mori', 'Computing', 2018);
INSERT INTO courses VALUES
  (1, 'MA101', 'Algebra', 5, 1),
  (2, 'MA201', 'Calculus', 5, 4),
  (3, 'PH101', 'Mechanics', 4, 2),
  (4, 'LI101', 'Poetry', 3, 3),
  (5, 'CS101', 'Programming', 5, 5),
  (6, 'CS201', 'Databases', 4, 5),
  (7, 'LI202', 'The Novel', 3, NULL);
INSERT INTO students VALUES
  (1, 'Ava Reid', 1, 'Oak'),
  (2, 'Ben Okoro', 1, 'Elm'),
  (3, 'Cara Lund', 2, 'Oak'),
  (4, 'Dev Patel', 2, 'Ash'),
  (5, 'Eli Moreau', 3, 'Elm'),
  (6, 'Fay Quinn', 3, 'Ash'),
  (7, 'Gil Adler', 4, 'Oak'),
  (8, 'Hui Zhang', 4, 'Elm'),
  (9, 'Ian Walsh', 1, 'Ash');
INSERT INTO enrollments VALUES
  (1, 1, 78), (1, 4, 85), (1, 5, NULL),
  (2, 1, 62), (2, 3, 70),
  (3, 2, 91), (3, 5, 88), (3, 6, NULL),
  (4, 2, 55), (4, 3, 67), (4, 5, 73),
  (5, 2, 81), (5, 6, 94), (5, 4, 77),
  (6, 3, 59), (6, 4, 92),
  (7, 6, 85), (7, 2, 70), (7, 3, 88),
  (8, 5, 97), (8, 6, 90);
